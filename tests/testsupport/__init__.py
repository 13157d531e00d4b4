"""What every black-box test of telemq shares (imported as `testsupport`).

* `process`: `BrokerProcess`, one ``python -m telemq serve`` subprocess with its own data
  directory and logs, started and stopped the way an operator would (SIGTERM). Its
  `finalize` fails the test when the broker ignored SIGTERM or logged a traceback;
* `paho`: `PahoClient`, a blocking wrapper around paho-mqtt's threaded client, which the MQ
  tests' `MQClient` extends with commands and replies, and `sys_value`, a broker's `$SYS`
  value read by a fresh subscriber;
* `spark_cluster`: `standalone_cluster`, a Spark standalone master and worker from PySpark's
  own ``bin/spark-class`` on loopback, the worker in a mount namespace that hides the
  directories a test names (the broker's data, as on another host);
* `node`: `MqttJsClient`, MQTT.js (npm, pinned by ``tests/interop/node/package-lock.json``)
  under Node, driven line by line, for interop tests with a client outside Python;
  `node_script`: `NodeScript`, the JSON-lines Node subprocess it and the dashboard's browser
  driver (`tests/dashboard/browser.py`) are built on;
* `raw5`: `Raw5`, a plain socket speaking MQTT 5.0 with telemq's own codec, and the `raw5`
  fixture that makes and closes them (the broker tests' conftest registers it);
* `postgres`: `PostgresServer`, a PostgreSQL server of the test process's own (``initdb`` and
  ``pg_ctl`` in a temporary directory, on loopback), with a database per test;
* `requirements`: `require`, the failure (never a skip) of a test whose program or npm
  package is missing: the test command's bootstrap installs them all.

The area-specific helpers (`tests/broker/helpers.py`: a raw MQTT codec and `RawClient`;
`tests/mq/helpers.py`: MQ command forms) build on these.
"""
