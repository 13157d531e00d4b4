"""telemq: an MQTT broker with the IBM MQ publish/subscribe model and a Spark data pipeline."""

__version__ = "0.1.0"
