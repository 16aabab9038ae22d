//! The application <-> daemon protocol. (Filled by the daemon work.)
