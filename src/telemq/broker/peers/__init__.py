"""The broker's neighbours: links to other telemq brokers (links.py; what arrives over them,
arrivals.py; their control messages, link_control.py) with their proxy subscriptions,
retained sync and remote queues, bridges to other MQTT brokers (bridges.py),
and the dialing loop both use (connector.py). They receive the core's rooms (`CoreRooms`)
and change state only through the rooms' methods. Never imports `operations`."""
