//! Reference attention in f64 on the CPU, seeded input generators, error metrics and tolerances.
