"""Black-box tests of the telemq broker over loopback (raw sockets, paho-mqtt, mosquitto)."""
