//! Prints the simulator figures table (see tests/simulator.rs).
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/sim/mod.rs"]
mod sim;

fn main() {
    let (table, _) = sim::scenarios::table();
    println!("{table}");
}
