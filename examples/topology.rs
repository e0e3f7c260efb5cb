//! What steer's LLC rule sees of a machine: which CPUs share a last-level
//! cache, on this machine or on a model of another (`steer topology` prints
//! the same as JSON).
//!
//! ```text
//! cargo run --example topology                                # this machine
//! cargo run --example topology -- "pack:2 l3:16 core:8 pu:1"   # a synthetic model
//! ```

use steer::topology::Topology;

fn main() -> Result<(), steer::topology::Error> {
    let topo = match std::env::args().nth(1) {
        Some(spec) => Topology::synthetic(&spec)?,
        None => Topology::live()?,
    };
    println!("source: {}", topo.source().name());
    for (i, llc) in topo.llcs().iter().enumerate() {
        println!("llc {i}: cpus {llc}");
    }
    let layout = topo.layout(); // what steer-core's LLC rule consults
    println!(
        "{} CPUs, {} online",
        layout.nr_cpus(),
        topo.online_cpus().len()
    );
    Ok(())
}
