"""The API layer: Ray's calls (``calls``, ``remote_function``, ``actor``, ``decorators``,
``runtime_context``) check the user's arguments (``options``, ``arity``) and make one
call on the process's runtime (``runtime``): a ``ClusterRuntime`` over a core worker,
which builds tasks with ``submission``, or a ``LocalRuntime`` (``local_mode``).
``worker_main`` starts a worker process. The layer sits above ``tracedray.core``;
``tracedray`` exports its public names.
"""
