//! What RFS needs to know about the machine: online CPUs, LLCs, NUMA nodes.
