//! The instruction sets a binary was built for, checked against the CPU it runs on.
//!
//! Release builds on x86-64 target `x86-64-v3` (AVX2, BMI2, FMA: every x86 server CPU since
//! 2013–2015), set in `.cargo/config.toml`: the JSON reader and writer then scan 32 bytes per
//! instruction instead of emulating it, ~17 % fewer instructions on a translated ~50 KB request.
//! On an older CPU such a binary would die of SIGILL at its first vector instruction; both planes
//! call [`missing`] first and exit with a sentence instead. `RUSTFLAGS="-C target-cpu=x86-64"`
//! builds a binary that runs anywhere.

/// The features this build needs that the CPU lacks, named as `-C target-feature` names them;
/// empty when the binary can run here (always on other architectures and on baseline builds).
pub fn missing() -> Vec<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        x86::missing()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Vec::new()
    }
}

/// The sentence a binary exits with when [`missing`] is not empty.
pub fn refusal(missing: &[&str]) -> String {
    format!(
        "this build of ax needs CPU features this machine lacks ({}); rebuild with \
         RUSTFLAGS=\"-C target-cpu=x86-64\" (or native) for this CPU",
        missing.join(", ")
    )
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{__cpuid, __cpuid_count};

    /// `(name, built for it, leaf, sub-leaf, register (0 ebx, 1 ecx), bit)`.
    const FEATURES: [(&str, bool, u32, u32, u8, u32); 8] = [
        ("avx", cfg!(target_feature = "avx"), 1, 0, 1, 28),
        ("fma", cfg!(target_feature = "fma"), 1, 0, 1, 12),
        ("movbe", cfg!(target_feature = "movbe"), 1, 0, 1, 22),
        ("f16c", cfg!(target_feature = "f16c"), 1, 0, 1, 29),
        ("avx2", cfg!(target_feature = "avx2"), 7, 0, 0, 5),
        ("bmi1", cfg!(target_feature = "bmi1"), 7, 0, 0, 3),
        ("bmi2", cfg!(target_feature = "bmi2"), 7, 0, 0, 8),
        ("lzcnt", cfg!(target_feature = "lzcnt"), 0x8000_0001, 0, 1, 5),
    ];

    pub fn missing() -> Vec<&'static str> {
        let max_basic = __cpuid(0).eax;
        let max_extended = __cpuid(0x8000_0000).eax;
        FEATURES
            .iter()
            .filter(|(_, built, leaf, sub, reg, bit)| {
                let max = if *leaf >= 0x8000_0000 { max_extended } else { max_basic };
                let present = *leaf <= max && {
                    let r = __cpuid_count(*leaf, *sub);
                    (if *reg == 0 { r.ebx } else { r.ecx }) >> bit & 1 == 1
                };
                *built && !present
            })
            .map(|f| f.0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    /// The machine that built the tests runs them: nothing it was built for is missing.
    #[test]
    fn the_building_machine_has_what_it_built_for() {
        assert_eq!(super::missing(), Vec::<&str>::new());
    }

    #[test]
    fn the_refusal_names_the_features_and_the_way_out() {
        let s = super::refusal(&["avx2", "bmi2"]);
        assert!(s.contains("avx2, bmi2") && s.contains("target-cpu=x86-64"), "{s}");
    }
}
