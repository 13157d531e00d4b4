"""Black-box tests of the MQ publish/subscribe command model over MQTT (design §5-6)."""
