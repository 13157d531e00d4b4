"""Who may do what: the configuration's users (users.py), their password hashes
(passwords.py) and ACL rules (acl.py), put together as one policy (auth.py, `Authorizer`), and
the hooks that authenticate, authorize and hear what happens (hooks.py). The bottom of the
broker: imports none of its other sub-packages."""
