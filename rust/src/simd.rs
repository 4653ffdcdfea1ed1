//! Runtime CPU feature checks for the multiversioned hot loops.
//!
//! The crate is built for baseline x86-64 (so one wheel runs everywhere); a few hot loops are
//! compiled a second time with `#[target_feature]` (x86-64-v3, AVX-512) and picked at run time.
//! Every variant computes exactly the same result.

/// Whether the CPU has the x86-64-v3 features the `*_v3` kernels are compiled for.
#[cfg(target_arch = "x86_64")]
pub fn has_x86_64_v3() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("bmi1")
        && std::arch::is_x86_feature_detected!("bmi2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("lzcnt")
        && std::arch::is_x86_feature_detected!("popcnt")
}

/// Whether the CPU has the AVX-512 features the `*_avx512` kernels are compiled for (plus v3).
#[cfg(target_arch = "x86_64")]
pub fn has_avx512() -> bool {
    has_x86_64_v3()
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512dq")
}

/// Whether the CPU also has AVX-512 VBMI (byte permutes), for the `collect` kernel.
#[cfg(target_arch = "x86_64")]
pub fn has_avx512_vbmi() -> bool {
    has_avx512() && std::arch::is_x86_feature_detected!("avx512vbmi")
}
