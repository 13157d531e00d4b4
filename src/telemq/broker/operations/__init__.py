"""What operators see and run: `$SYS` (sys.py), `/metrics` (metrics.py), the admin API and
its views (admin_api.py, admin_views.py), the dashboard (dashboard.py), the MQ command host
(mq.py) and housekeeping (retention, session expiry). Reports read a `BrokerView` (view.py),
never the broker. Never imports `peers`."""
