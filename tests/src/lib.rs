//! Helpers for the end-to-end tests: starting daemons, network namespaces, programs.
