//! The spin detector's test programs, as a library and the
//! `vsched-zoo` executable (src/main.rs): the spin zoo (waiting
//! implementations), the non-spinning zoo (compute kernels), and the effect
//! programs (a spin token ring, a spinning pipeline). Tests and benchmarks
//! run them as separate processes and watch them like any other program;
//! [`exe`] finds the executable. The library is linked into `vsched`
//! through vsched-bench (`vsched bench spin` takes the programs' names,
//! their ground truth and [`exe`] from it); the programs run only as the
//! `vsched-zoo` executable.

pub mod cli;
pub mod compute;
pub mod exe;
pub mod locks;
pub mod programs;
mod queue;
pub mod truth;
pub mod work;

pub use truth::{Episode, Truth};
