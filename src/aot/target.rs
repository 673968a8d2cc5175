//! The machine an object file is for: the host, or a target triple with CPU features.

use std::fmt;
use std::str::FromStr;

use cranelift_codegen::isa::{self, OwnedTargetIsa};
use cranelift_codegen::settings::{Configurable, SettingKind};
use target_lexicon::{Architecture, Endianness, PointerWidth, Triple};

use crate::error::{Error, Result};
use crate::jit;

/// The triples [`Target::new`] accepts. Each is 64-bit and little-endian, as the kernels'
/// parameter blocks and the `sj_args` layout of the C ABI assume, and writes ELF objects.
pub const SUPPORTED: &[&str] = &[
    "x86_64-unknown-linux-gnu",
    "aarch64-unknown-linux-gnu",
    "riscv64gc-unknown-linux-gnu",
];

/// The machine ahead-of-time code runs on.
///
/// [`Target::host`] is the machine compiling, with every feature its CPU has. A target
/// from [`Target::new`] starts from its architecture's baseline (x86-64 with SSE2; AArch64
/// with Advanced SIMD; RV64GC, whose code then has no vector instructions) and adds the
/// CPU features it is given, by Cranelift's names: a feature (`avx2`, `lse`, `v`) or a
/// level (`x86-64-v3`, `haswell`).
///
/// ```
/// use scatterjit::aot::Target;
/// let avx2 = Target::new("x86_64-unknown-linux-gnu", &["x86-64-v3"])?;
/// assert_eq!(avx2.to_string(), "x86_64-unknown-linux-gnu+x86-64-v3");
/// assert!(Target::new("mips64-unknown-linux-gnuabi64", &[]).is_err());
/// # Ok::<(), scatterjit::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `None` for the host.
    triple: Option<Triple>,
    features: Vec<String>,
}

impl Target {
    /// The machine compiling, with every feature its CPU has.
    pub fn host() -> Target {
        Target {
            triple: None,
            features: Vec::new(),
        }
    }

    /// `triple` (one of [`SUPPORTED`]) with `features` added to its baseline. Errors name
    /// the supported triples, or the features the triple's architecture knows.
    pub fn new(triple: &str, features: &[&str]) -> Result<Target> {
        let unsupported = |why: &str| Error::Target {
            target: triple.to_string(),
            message: format!("{why}; supported targets: {}", SUPPORTED.join(", ")),
        };
        if !SUPPORTED.contains(&triple) {
            return Err(unsupported("not a supported target"));
        }
        let parsed = Triple::from_str(triple).map_err(|e| unsupported(&e.to_string()))?;
        debug_assert_eq!(parsed.pointer_width(), Ok(PointerWidth::U64));
        debug_assert_eq!(parsed.endianness(), Ok(Endianness::Little));
        let target = Target {
            triple: Some(parsed),
            features: features.iter().map(|f| f.to_string()).collect(),
        };
        target.builder()?;
        Ok(target)
    }

    /// Cranelift's description of the ISA: the triple's baseline and the features.
    fn builder(&self) -> Result<isa::Builder> {
        let Some(triple) = &self.triple else {
            return cranelift_native::builder().map_err(|e| self.error(e.to_string()));
        };
        let mut builder =
            isa::lookup(triple.clone()).map_err(|e| self.error(format!("no back end: {e}")))?;
        // The `gc` of the triple promises compressed instructions, which Cranelift's
        // RISC-V baseline leaves out.
        if let Architecture::Riscv64(target_lexicon::Riscv64Architecture::Riscv64gc) =
            triple.architecture
        {
            builder
                .enable("has_c")
                .map_err(|e| self.error(e.to_string()))?;
        }
        for feature in &self.features {
            let with_prefix = format!("has_{feature}");
            let known = builder
                .iter()
                .find(|s| {
                    matches!(s.kind, SettingKind::Bool | SettingKind::Preset)
                        && (s.name == feature || s.name == with_prefix)
                })
                .map(|s| s.name);
            let Some(name) = known else {
                let mut names: Vec<&str> = Vec::new();
                for setting in builder.iter() {
                    let name = setting.name.strip_prefix("has_").unwrap_or(setting.name);
                    if matches!(setting.kind, SettingKind::Bool | SettingKind::Preset)
                        && !names.contains(&name)
                    {
                        names.push(name);
                    }
                }
                return Err(self.error(format!(
                    "unknown CPU feature `{feature}`; known: {}",
                    names.join(", ")
                )));
            };
            builder
                .enable(name)
                .map_err(|e| self.error(format!("CPU feature `{feature}`: {e}")))?;
        }
        Ok(builder)
    }

    /// The ISA for position-independent object code.
    pub(crate) fn isa(&self) -> Result<OwnedTargetIsa> {
        if self.triple.is_none() {
            return jit::isa(true);
        }
        jit::finish_isa(&self.builder()?, true).map_err(|e| self.error(e))
    }

    /// An error about this target, named by its triple.
    fn error(&self, message: String) -> Error {
        let target = match &self.triple {
            Some(triple) => triple.to_string(),
            None => "host".to_string(),
        };
        Error::Target { target, message }
    }
}

impl Default for Target {
    fn default() -> Self {
        Target::host()
    }
}

/// `host`, or the triple and its features joined by `+`.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.triple {
            None => f.write_str("host"),
            Some(triple) => {
                write!(f, "{triple}")?;
                self.features.iter().try_for_each(|x| write!(f, "+{x}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_triple_builds_an_isa() {
        for triple in SUPPORTED {
            let isa = Target::new(triple, &[]).unwrap().isa().unwrap();
            assert_eq!(isa.triple().to_string(), *triple);
            assert_eq!(isa.triple().pointer_width(), Ok(PointerWidth::U64));
            assert_eq!(isa.triple().endianness(), Ok(Endianness::Little));
        }
    }

    #[test]
    fn an_unsupported_triple_names_the_supported_ones() {
        for triple in ["s390x-unknown-linux-gnu", "riscv64", "x86_64", "nonsense"] {
            let e = Target::new(triple, &[]).unwrap_err().to_string();
            assert!(e.contains(triple), "{e}");
            for supported in SUPPORTED {
                assert!(e.contains(supported), "{e}");
            }
        }
    }

    #[test]
    fn features_are_cranelift_names_with_or_without_has() {
        let x86 = "x86_64-unknown-linux-gnu";
        let flag = |t: &Target, name: &str| {
            t.isa()
                .unwrap()
                .isa_flags()
                .iter()
                .any(|f| f.name == name && f.as_bool() == Some(true))
        };
        assert!(!flag(&Target::new(x86, &[]).unwrap(), "has_avx2"));
        assert!(flag(&Target::new(x86, &["avx2"]).unwrap(), "has_avx2"));
        assert!(flag(&Target::new(x86, &["has_avx2"]).unwrap(), "has_avx2"));
        assert!(flag(&Target::new(x86, &["x86-64-v3"]).unwrap(), "has_avx2"));
        let riscv = Target::new("riscv64gc-unknown-linux-gnu", &[]).unwrap();
        assert!(flag(&riscv, "has_zca") && !flag(&riscv, "has_v"));
        let e = Target::new(x86, &["neon"]).unwrap_err().to_string();
        assert!(e.contains("`neon`") && e.contains("avx2"), "{e}");
    }
}
