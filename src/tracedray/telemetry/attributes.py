"""Span attribute keys: the contract dashboards, tests and the CLI are built on.

Every custom key lives under ``tracedray.``; docs/telemetry.md documents each.
Core code imports these constants instead of spelling strings.
"""

from __future__ import annotations

# --- tasks
TASK_ID = "tracedray.task.id"  # same hex as ObjectRef.task_id().hex()
TASK_FUNCTION = "tracedray.task.function"  # module.qualname, or Class.method
TASK_ATTEMPT = "tracedray.task.attempt"  # 0 for the first attempt
TASK_KIND = "tracedray.task.kind"  # normal | actor_creation | actor_method
TASK_CALL_SITE = "tracedray.task.call_site"  # "file.py:12 in main" of the .remote() call
TASK_STATE = "tracedray.task.state"  # final state when the span ends
TASK_MAX_RETRIES = "tracedray.task.max_retries"
# Why the GCS failed a task its job's end left unfinished (task.job_end), e.g.
# "owner died: job 01000000 failed, its driver died: …, while the task was RUNNING …"
TASK_FAILURE_REASON = "tracedray.task.failure_reason"
JOB_ID = "tracedray.job.id"
JOB_STATE = "tracedray.job.state"  # how a job ended (job.finish): FINISHED | FAILED
JOB_END_REASON = "tracedray.job.end_reason"  # e.g. "its driver died: process 42 is gone …"

# --- actors
ACTOR_ID = "tracedray.actor.id"
ACTOR_CLASS = "tracedray.actor.class"
ACTOR_NAME = "tracedray.actor.name"
# A restarted GCS's release of what the GCS before it left for actor creations
# (actor.release_unused): the actors it creates again, the requests the raylets answered
# instead of granting, the pids of the actor workers they killed.
ACTOR_RECREATED = "tracedray.actor.recreated"
ACTOR_REQUESTS_WITHDRAWN = "tracedray.actor.requests_withdrawn"
ACTOR_WORKERS_KILLED = "tracedray.actor.workers_killed"

# --- objects
OBJECT_ID = "tracedray.object.id"  # same hex as ObjectRef.hex()
OBJECT_SIZE = "tracedray.object.size"  # bytes
OBJECT_LOCATION = "tracedray.object.location"  # inline | shm | spilled
OBJECT_CALL_SITE = "tracedray.object.call_site"
OBJECT_COUNT = "tracedray.object.count"  # get/wait over several refs
OBJECT_COPY = "tracedray.object.copy"  # primary | secondary (object.seal)
# Why an object left the store (object.free): released (its owner let go of the last
# reference) | owner exited | owner died
OBJECT_FREE_REASON = "tracedray.object.free_reason"
STORE_USED = "tracedray.store.used"  # bytes in the node's store after the event
STORE_CAPACITY = "tracedray.store.capacity"
SPILL_PATH = "tracedray.spill.path"
TRANSFER_FROM_NODE = "tracedray.transfer.from_node"
TRANSFER_TO_NODE = "tracedray.transfer.to_node"
TRANSFER_BYTES = "tracedray.transfer.bytes"
TRANSFER_STREAMS = "tracedray.transfer.streams"  # data-path connections; 0: the gRPC stream

# --- placement
NODE_ID = "tracedray.node.id"
NODE_IP = "tracedray.node.ip"
WORKER_ID = "tracedray.worker.id"
WORKER_PID = "tracedray.worker.pid"
SCHEDULING_CANDIDATES = "tracedray.scheduling.candidates"  # list of node ids considered
SCHEDULING_LOCAL_BYTES = "tracedray.scheduling.local_bytes"  # list, parallel to candidates
SCHEDULING_QUEUE_LENGTHS = "tracedray.scheduling.queue_lengths"  # list, parallel to candidates
SCHEDULING_REASON = "tracedray.scheduling.reason"
SCHEDULING_CHOSEN_NODE = "tracedray.scheduling.chosen_node"
RESOURCES = "tracedray.resources"  # JSON of the resource request
# Why a task.dispatch span ended without its worker's reply (e.g. "requeued": the
# worker handed the task back unstarted, and it goes out again).
DISPATCH_NOTE = "tracedray.dispatch.note"

# --- process exits (recorded by the raylet that saw them)
EXIT_CODE = "tracedray.exit.code"
EXIT_SIGNAL = "tracedray.exit.signal"  # e.g. "SIGKILL"
EXIT_MEANING = "tracedray.exit.meaning"  # e.g. "killed by the OS, often the OOM killer"
# Why the raylet stopped it: idle | shutdown | killed | "lessee died: pid …" (its lease's
# holder died; the rest names it) | "lessee left its tasks running: pid …" (its lease's
# holder shut down and gave it back while it still ran that holder's tasks).
EXIT_REASON = "tracedray.exit.reason"
# The node's memory in use when a worker's exit was seen: only where that memory is (or
# may be) what killed it (EXIT_CAUSE node_oom or unknown).
NODE_MEMORY_PERCENT = "tracedray.node.memory_percent"
# Why a SIGKILL came: cgroup_oom | node_oom | not_oom | unknown (from the kernel's OOM
# kill counts for the worker's cgroup and the node, read at its start and its death).
EXIT_CAUSE = "tracedray.exit.cause"
EXIT_CGROUP = "tracedray.exit.cgroup"  # the worker's memory cgroup, e.g. "/user.slice/job-7"
EXIT_MEMORY_LIMIT = "tracedray.exit.memory_limit"  # bytes: its cgroup's, lowest up the tree
EXIT_PEAK_RSS = "tracedray.exit.peak_rss"  # bytes: the worker's peak resident set
# When the attempt a dead worker was running started there (unix ns, from its flight
# recorder): a SIGKILLed attempt has no task.execute span to say it.
TASK_STARTED = "tracedray.task.started_unix_nano"

# --- GCS
GCS_TABLE = "tracedray.gcs.table"
GCS_FLUSH_ENTRIES = "tracedray.gcs.flush.entries"
GCS_FLUSH_BYTES = "tracedray.gcs.flush.bytes"
GCS_MEMORY_BEFORE = "tracedray.gcs.memory_before"
GCS_MEMORY_AFTER = "tracedray.gcs.memory_after"
GCS_HOT_ENTRIES = "tracedray.gcs.hot_entries"  # left in memory after a flush, all tables
GCS_STORAGE = "tracedray.gcs.storage"
GCS_NODES = "tracedray.gcs.nodes"  # how many raylets the GCS asked
GCS_NODES_UNANSWERED = "tracedray.gcs.nodes_unanswered"  # ids of those that did not answer

# --- resource attributes (besides the OTel semantic-convention ones)
RESOURCE_NODE_ID = "tracedray.node.id"
RESOURCE_SESSION_ID = "tracedray.session.id"
RESOURCE_COMPONENT = "tracedray.component"  # driver | worker | raylet | gcs | cli

# --- errors (OTel semantic conventions: stable error.type and exception.* keys)
ERROR_TYPE = "error.type"  # qualified class name of the exception
EXCEPTION_EVENT = "exception"  # name of the span event that carries the traceback
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"
EXCEPTION_STACKTRACE = "exception.stacktrace"

# --- GCS supervision (gcs.restart spans)
GCS_ADDRESS = "tracedray.gcs.address"
GCS_OLD_PID = "tracedray.gcs.old_pid"  # the GCS process that died
GCS_NEW_PID = "tracedray.gcs.new_pid"  # the one that replaced it
GCS_EXIT = "tracedray.gcs.exit"  # how the old one ended: "SIGKILL", "exit 1", "unknown ..."
GCS_RESTART_ATTEMPTS = "tracedray.gcs.restart_attempts"

# Multi-node
NODE_DEATH_REASON = "tracedray.node.death_reason"
NODE_VERSION_DRIFT = "tracedray.node.version_drift"  # list of "pkg: head X, node Y"
NODE_CLOCK_OFFSET_S = "tracedray.node.clock_offset_s"
LEASE_ID = "tracedray.lease.id"  # the worker lease a task was dispatched on
TRANSFER_SHARED = "tracedray.transfer.shared"  # this pull joined one already in progress
OBJECT_RECONSTRUCTION_CAUSE = "tracedray.object.reconstruction_cause"
