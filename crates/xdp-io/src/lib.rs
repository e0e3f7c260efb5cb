//! AF_XDP data path for steer: one socket per rx queue sharing one UMEM,
//! and the XDP program that redirects only the traffic steer owns.
