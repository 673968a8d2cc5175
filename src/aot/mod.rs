//! Ahead-of-time compilation: the kernels of a list of keys in one object file for the
//! host or another [`Target`], and a C header that declares one entry per key.
//!
//! The object holds, per key, every pass of its plan as `Strided` and `Contiguous` code
//! and, where the pass picks by its index, as `Contiguous` code that addresses picks one
//! element apart by a shift (the same lowering as the JIT, through
//! `jit::define_pass`, as local symbols) and one exported
//! entry, `int32_t sj_<key>(sj_args *args)` (see [`symbol`] and `entry.rs`), which
//! validates the call and runs the passes. Linking it needs only the C library (`memcpy`).
//! The header is the same for every target.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use scatterjit::aot::Target;
//! let key = "gather.f32.i64.r2.q1.a0".parse()?;
//! let out = scatterjit::aot::compile(&[key])?;
//! std::fs::write("kernels.o", &out.object)?;
//! std::fs::write("kernels.h", &out.header)?;
//! let arm = Target::new("aarch64-unknown-linux-gnu", &[])?;
//! std::fs::write("kernels-aarch64.o", scatterjit::aot::compile_for(&[key], &arm)?.object)?;
//! # Ok(()) }
//! ```

mod entry;
mod header;
mod target;

pub use target::{Target, SUPPORTED};

use cranelift_codegen::ir::{types, AbiParam, UserFuncName};
use cranelift_codegen::verify_function;
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{default_libcall_names, Linkage, Module};
use cranelift_object::{ObjectBuilder, ObjectModule};
use scatterjit_ir::{DType, Error as IrError, KernelKey, Plan};

use crate::abi::{ParamLayout, Picks, Variant};
use crate::codegen::Bounds;
use crate::error::{Error, Result};
use crate::jit;
use entry::PassRefs;

/// What [`compile`] produces.
#[derive(Clone, Debug)]
pub struct Artifacts {
    /// A relocatable object file in the target's format (ELF on Linux, Mach-O on macOS).
    pub object: Vec<u8>,
    /// The C header declaring its entries, self-contained (it embeds `scatterjit_abi.h`).
    pub header: String,
}

/// The C symbol of `key`'s entry: `sj_` and the key's printed name with `.` as `_`
/// (`sj_gather_f32_i64_r2_q1_a0`). Distinct keys have distinct symbols: the fields of a
/// printed key contain no `_` except in the op's name, which comes first.
pub fn symbol(key: &KernelKey) -> String {
    format!("sj_{}", key.to_string().replace('.', "_"))
}

/// Whether `key` can be compiled ahead of time: every key over numbers. String tensors
/// have no bytes for compiled code (the library runs them on integer handles).
pub fn check_supported(key: &KernelKey) -> Result<()> {
    if key.dtype() == DType::String {
        return Err(Error::Invalid(IrError::InvalidKey {
            key: key.to_string(),
            reason: "string tensors are not available ahead of time (compiled code moves \
                     bytes, and strings have none); use the library's run functions"
                .into(),
        }));
    }
    Ok(())
}

/// Compiles `keys` (duplicates are compiled once) into one object file for the host and
/// its header.
pub fn compile(keys: &[KernelKey]) -> Result<Artifacts> {
    compile_for(keys, &Target::host())
}

/// Compiles `keys` (duplicates are compiled once) into one object file for `target` and
/// its header.
pub fn compile_for(keys: &[KernelKey], target: &Target) -> Result<Artifacts> {
    let mut unique: Vec<KernelKey> = Vec::new();
    for key in keys {
        check_supported(key)?;
        if !unique.contains(key) {
            unique.push(*key);
        }
    }
    let isa = target.isa()?;
    let codegen_error = |key: String, message: String| Error::Codegen {
        key,
        message,
        clif: String::new(),
    };
    let builder = ObjectBuilder::new(isa, "scatterjit", default_libcall_names())
        .map_err(|e| codegen_error(String::new(), e.to_string()))?;
    let mut module = ObjectModule::new(builder);
    for key in &unique {
        define_key(&mut module, key)?;
    }
    let object = module
        .finish()
        .emit()
        .map_err(|e| codegen_error(String::new(), e.to_string()))?;
    Ok(Artifacts {
        object,
        header: header::header(&unique),
    })
}

/// Defines the passes of `key` (local) and its entry (exported) in `module`.
fn define_key(module: &mut ObjectModule, key: &KernelKey) -> Result<()> {
    let plan = Plan::new(*key);
    let name = symbol(key);
    let mut passes = Vec::new();
    for nest in &plan.passes {
        let mut define = |variant: Variant| {
            let variant_name = variant.name().replace('.', "_");
            let pass_name = format!("{name}__{}_{variant_name}", nest.pass.name());
            jit::define_pass(
                module,
                &plan,
                nest.pass,
                variant,
                false,
                Bounds::Checked,
                &pass_name,
                jit::CodeHome::Object,
                false,
            )
            .map(|(id, _, _)| id)
        };
        let [strided, contiguous] = Variant::ALL;
        let ids = [define(strided)?, define(contiguous)?];
        // A pass that picks by its index also gets contiguous code that addresses picks one
        // element apart by a shift (`Picks::Adjacent`), which the entry calls where the
        // strides allow it; in other passes it would be the same code again.
        let adjacent = match ParamLayout::of(nest).picks_by_index() {
            true => Some(define(Variant::Contiguous(Picks::Adjacent))?),
            false => None,
        };
        passes.push((nest.pass, ids, adjacent));
    }

    let codegen_error = |message: String, clif: String| Error::Codegen {
        key: name.clone(),
        message,
        clif,
    };
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(ptr));
    sig.returns.push(AbiParam::new(types::I32));
    let id = module
        .declare_function(&name, Linkage::Export, &sig)
        .map_err(|e| codegen_error(e.to_string(), String::new()))?;
    let mut ctx: Context = module.make_context();
    ctx.func.signature = sig;
    ctx.func.name = UserFuncName::user(0, id.as_u32());
    let refs: Vec<PassRefs> = passes
        .iter()
        .map(|(kind, ids, adjacent)| PassRefs {
            kind: *kind,
            variants: ids.map(|id| module.declare_func_in_func(id, &mut ctx.func)),
            adjacent: adjacent.map(|id| module.declare_func_in_func(id, &mut ctx.func)),
        })
        .collect();
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        entry::build_entry(&mut b, &plan, &refs, ptr);
        b.finalize(module.target_config());
    }
    let clif = ctx.func.display().to_string();
    verify_function(&ctx.func, module.isa())
        .map_err(|errors| codegen_error(errors.to_string(), clif.clone()))?;
    module
        .define_function(id, &mut ctx)
        .map_err(|e| codegen_error(format!("{e:?}"), clif))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use scatterjit_ir::{DType, Reduction};

    #[test]
    fn strings_are_refused_by_name() {
        let key = KernelKey::gather(DType::String, DType::I64, 1, 1, 0).unwrap();
        let e = compile(&[key]).unwrap_err().to_string();
        assert!(
            e.contains("gather.string.i64.r1.q1.a0") && e.contains("ahead of time"),
            "{e}"
        );
    }

    /// Every mean key and every f16 and bf16 reduction, on every supported target: each
    /// instruction the init, apply and finish nests emit (i128 sums, the floor division,
    /// half floats converted in vector lanes) is one the back end can lower.
    #[test]
    fn every_target_compiles_every_mean_and_half_float_reduction() {
        let means = DType::ALL
            .iter()
            .filter(|&&d| Reduction::Mean.supports(d))
            .flat_map(|&d| [true, false].map(|init| (d, Reduction::Mean, init)));
        let halves = [DType::F16, DType::BF16].into_iter().flat_map(|d| {
            [
                Reduction::Add,
                Reduction::Mul,
                Reduction::Max,
                Reduction::Min,
            ]
            .map(|r| (d, r, true))
        });
        let keys: Vec<KernelKey> = means
            .chain(halves)
            .map(|(d, r, init)| KernelKey::scatter_elements(d, DType::I32, 2, 1, r, init).unwrap())
            .collect();
        assert_eq!(keys.len(), 32);
        let targets = [
            ("x86_64-unknown-linux-gnu", &[][..]),
            ("x86_64-unknown-linux-gnu", &["x86-64-v3"][..]),
            ("aarch64-unknown-linux-gnu", &[][..]),
            ("riscv64gc-unknown-linux-gnu", &[][..]),
            ("riscv64gc-unknown-linux-gnu", &["v"][..]),
        ];
        assert!(SUPPORTED
            .iter()
            .all(|t| targets.iter().any(|(u, _)| t == u)));
        for (triple, features) in targets {
            let target = Target::new(triple, features).unwrap();
            compile_for(&keys, &target).unwrap_or_else(|e| panic!("{triple} {features:?}: {e}"));
        }
    }

    /// On RV64GC without `v` every pass takes the scalar form of the vector paths: no
    /// vector type in its CLIF. With `v` the same passes use vectors.
    #[test]
    fn a_machine_without_vectors_gets_no_vector_code() {
        let vector_types = ["i8x16", "i16x8", "i32x4", "i64x2", "f32x4", "f64x2"];
        let keys = [
            // Uniform rows, whole-row vector max, 16-byte row moves.
            KernelKey::scatter_elements(DType::F32, DType::I32, 2, 0, Reduction::Max, true),
            KernelKey::scatter_elements(DType::U8, DType::I64, 2, 0, Reduction::Add, false),
            KernelKey::gather(DType::I64, DType::I64, 2, 1, 0),
        ];
        let listing = |target: &Target| {
            let mut module = ObjectModule::new(
                ObjectBuilder::new(target.isa().unwrap(), "t", default_libcall_names()).unwrap(),
            );
            let mut clif = String::new();
            for key in &keys {
                let plan = Plan::new(*key.as_ref().unwrap());
                for nest in &plan.passes {
                    let name = format!("{}_{}", plan.key, nest.pass.name()).replace('.', "_");
                    let (_, _, text) = jit::define_pass(
                        &mut module,
                        &plan,
                        nest.pass,
                        Variant::Contiguous(crate::abi::Picks::Strided),
                        false,
                        Bounds::Checked,
                        &name,
                        jit::CodeHome::Object,
                        true,
                    )
                    .unwrap();
                    clif += &text.unwrap().clif;
                }
            }
            clif
        };
        let riscv = "riscv64gc-unknown-linux-gnu";
        let scalar = listing(&Target::new(riscv, &[]).unwrap());
        for ty in vector_types {
            assert!(!scalar.contains(ty), "{ty} in code for {riscv}");
        }
        let vector = listing(&Target::new(riscv, &["v"]).unwrap());
        assert!(vector_types.iter().any(|ty| vector.contains(ty)));
    }

    /// The passes that pick by their index (init, apply) carry the adjacent form of
    /// `Contiguous`; the check and the copy, which pick nothing, carry none.
    #[test]
    fn passes_that_pick_carry_the_adjacent_form() {
        let key = KernelKey::scatter_elements(DType::F32, DType::I64, 2, 1, Reduction::Max, false)
            .unwrap();
        let object = compile(&[key]).unwrap().object;
        let has = |name: &str| object.windows(name.len()).any(|w| w == name.as_bytes());
        let name = symbol(&key);
        for pass in ["init", "apply"] {
            let local = format!("{name}__{pass}_contiguous_adjacent");
            assert!(has(&local), "{local} in the object");
        }
        for pass in ["check", "copy"] {
            assert!(has(&format!("{name}__{pass}_contiguous")));
            assert!(!has(&format!("{name}__{pass}_contiguous_adjacent")));
        }
    }

    #[test]
    fn symbols_are_c_identifiers() {
        let key = KernelKey::gather(DType::BF16, DType::U8, 3, 0, -1).unwrap();
        assert_eq!(symbol(&key), "sj_gather_bf16_u8_r3_q0_a2");
    }

    #[test]
    fn an_object_holds_every_entry() {
        let keys = [
            KernelKey::scatter_elements(DType::F16, DType::I32, 3, 1, Reduction::Max, false)
                .unwrap(),
            KernelKey::gather(DType::Complex128, DType::U8, 1, 0, 0).unwrap(),
        ];
        let out = compile(&keys).unwrap();
        for key in &keys {
            let name = symbol(key);
            let bytes = name.as_bytes();
            assert!(
                out.object.windows(bytes.len()).any(|w| w == bytes),
                "{name} in the object"
            );
            assert!(out
                .header
                .contains(&format!("int32_t {name}(sj_args *args);")));
        }
    }
}
