"""The review loop beside `calimon serve`: the queue of decisions for people to label
(`queue`), the label store (`labels`, `store`, `pg_store`) with its claims and conflicts, the live
status and certificates (`status`), the drift watch (`drift`), the export of labelled traffic
(`export`), and the review pages and their API (`pages`, `assets`, `evidence`, `api`).

`calimon.serve` (the service's core) does not import this package; the application
(`calimon.serve.app`, `calimon.serve.runner`) attaches it when the review queue is on."""
