"""Who may do what: users, password hashes and ACL rules (auth.py), and the hooks that
authenticate, authorize and hear what happens (hooks.py). The bottom of the broker: imports
none of its other sub-packages."""
