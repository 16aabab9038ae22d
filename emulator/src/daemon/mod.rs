//! The daemon: client sessions, shared memory, backends, the engine loop.
