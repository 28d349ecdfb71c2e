"""How tracedray's processes talk to each other: the raylet's client, the task stream
(frames, TLS, a caller's connection), the flight-recorder slot a worker writes and its
raylet reads, the resource arithmetic both the GCS and the raylets use, and the pure
conversions of the cluster's messages into the state API's rows (``state_rows``), and
task events written in protobuf's wire format (``task_event_wire``, on ``wire``'s varint).

Imports only plumbing (``tracedray.core``'s ``rpc``, ``auth``, ``tls``, ``address``),
the generated messages and the exception tree, so every process package may import it.
"""
