"""The group coordinator: consumer groups (classic protocol) and committed offsets, as pure state.

Modules:

- ``records``      the ``__consumer_offsets`` key/value formats (Kafka's, byte for byte) and the
                   group → partition rule;
- ``persistence``  the port the broker implements to store those records, batch encoding, loading;
- ``messages``     the coordinator's own request/response values (the broker maps kio to them);
- ``group``        one classic group: members, states, protocol selection;
- ``offsets``      committed offsets, expiry rules;
- ``timers``       deadlines keyed by name, fired by ``tick(now)``;
- ``coordinator``  :class:`~tidelog.coordinator.coordinator.GroupCoordinator`, the state machine
                   every group API goes through.

Nothing here reads a clock, opens a file or awaits: callers pass ``now_ms`` and perform the writes
the coordinator asks for (see ``coordinator``'s module docstring for that contract).
"""
