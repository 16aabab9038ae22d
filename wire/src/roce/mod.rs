//! RoCE v2 / IB transport headers. (Filled by the core work.)
