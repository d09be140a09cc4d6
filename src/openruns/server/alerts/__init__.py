"""
Alerts (issue 22): rules per team or project, evaluated on what changed, delivered to signed
webhooks.

- rules.py: what a rule is (its condition, its webhook), as the API takes and gives it.
- evaluator.py: the lifespan task that claims the runs that changed, checks each rule's
  condition, and queues a delivery when a condition starts to hold.
- delivery.py: the lifespan task that claims due deliveries and sends them (the body, the
  signature, retries with backoff and jitter).
- run_alerts.py: alerts a run sends itself (`run.alert`, and the SDK's report of a metric
  value that is NaN or infinite), uploaded like annotations.
- routes.py: /api/v1/alerts/rules, /api/v1/alerts/deliveries, /api/v1/runs/{id}/alerts.

The SQL is store/alerts.py.
"""
