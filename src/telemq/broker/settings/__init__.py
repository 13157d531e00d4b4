"""How a broker is configured: the TOML file's typed sections (config.py), the network's
`[[links]]` and `[[bridges]]` (network.py), TLS contexts (tls.py), and the one error every
check raises (errors.py). Imports nothing of the broker but `security` (users and ACL rules
are configuration too)."""
