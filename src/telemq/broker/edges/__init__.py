"""Where connections come from: TCP and in-process listeners (listeners.py), the HTTP
listeners and the journal service (http.py), MQTT over WebSockets (websockets.py). A new
kind of listener goes here. Imports `settings` and `security` only."""
