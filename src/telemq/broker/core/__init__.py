"""The broker's state and the per-message path: one room per piece of state.

`Session`, `Client` and `ClientHub` (session.py: a session and the connection attached to
it), `Message` and `Delivery` (message.py), `Admission`, `Sessions`, `Router`, `Deliveries`,
`SubscriptionManager`, `RetainedMessages`, `Wills`, `Shares`, the group commit
(`Committer`), the counters (`BrokerStats`) and the restore of a stored state. Imports
`settings` and `security` only: the edges, peers and operations are built on top of it
(`CoreRooms` is what they receive).
"""
