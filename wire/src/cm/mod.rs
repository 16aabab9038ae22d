//! IB CM MADs (IBA vol. 1 ch. 12) as RDMA CM uses them. (Filled by the wire work.)
