"""Security: TLS contexts, SASL server side, credentials, the ACL authorizer and its audit mode.

L2: imports ``common`` and ``protocol`` only. The broker wires these pieces into listeners,
connections and handlers; see ``docs/security.md`` for the operator's view.
"""
