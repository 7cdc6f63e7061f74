//! Test programs for the detector: the spin zoo (waiting implementations),
//! the non-spinning zoo (compute kernels), and the effect programs.

pub mod compute;
pub mod locks;
pub mod programs;
