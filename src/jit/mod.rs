//! Cranelift module ownership: compiles a [`Plan`] into native passes. This is the one
//! place that turns code addresses into function pointers.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use cranelift_codegen::ir::{types, AbiParam, Signature, UserFuncName};
use cranelift_codegen::isa::{self, OwnedTargetIsa, TargetFrontendConfig, TargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::{verify_function, Context};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module};
use scatterjit_ir::{PassKind, Plan};
use target_lexicon::{Architecture, Triple};

use crate::abi::Variant;
use crate::codegen::{self, Bounds, Machine, Prefetch};
use crate::error::{Error, Result};

mod f16_table;
mod prefetch;
mod stream;

pub use prefetch::set_prefetch_from;
pub(crate) use prefetch::{cache_resident, private_cache};
pub(crate) use stream::stream_from;
pub use stream::{set_stream_from, STREAM_FROM};

/// A compiled pass: `extern "C" fn(operands, params) -> status` (see `crate::abi`).
pub(crate) type PassFn = unsafe extern "C" fn(*const *mut u8, *mut i64) -> i64;

/// Text renderings of one compiled pass, for `explain` and golden files.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// Which pass.
    pub pass: Option<PassKind>,
    /// Which variant of its innermost loop (`strided`, `contiguous`, `broadcast…`; rows
    /// that address their picks by a shift end in `.adjacent`).
    pub variant: String,
    /// The CLIF as the lowering built it.
    pub clif: String,
    /// The CLIF after Cranelift's optimizations.
    pub optimized: String,
    /// The machine code, as Cranelift's disassembly of its VCode.
    pub asm: String,
}

/// JIT code alive in the process, every cache's kernels together: a soak test counts it to
/// show that evicted kernels free their code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveCode {
    /// JIT modules not yet freed (one per compiled pass variant).
    pub modules: usize,
    /// Bytes of machine code in them (their mappings are page-sized or larger).
    pub code_bytes: usize,
}

static LIVE_MODULES: AtomicUsize = AtomicUsize::new(0);
static LIVE_CODE_BYTES: AtomicUsize = AtomicUsize::new(0);

/// The JIT code alive now.
pub fn live_code() -> LiveCode {
    LiveCode {
        modules: LIVE_MODULES.load(Ordering::Relaxed),
        code_bytes: LIVE_CODE_BYTES.load(Ordering::Relaxed),
    }
}

/// The machine code of one pass variant: its own JIT module, freed when this is dropped.
pub(crate) struct Code {
    // JITModule is Send but not Sync; the mutex makes `Code` shareable. It is only
    // touched again on drop.
    module: Mutex<Option<JITModule>>,
    entry: PassFn,
    code_bytes: usize,
}

impl Code {
    /// The compiled function.
    pub(crate) fn entry(&self) -> PassFn {
        self.entry
    }
}

impl Drop for Code {
    fn drop(&mut self) {
        let module = self
            .module
            .get_mut()
            .map(Option::take)
            .unwrap_or_else(|e| e.into_inner().take());
        if let Some(module) = module {
            // SAFETY: `Code` is owned by one `Kernel`, which lives in an `Arc`; it is dropped
            // only when the last handle is gone, so no pass is running or can be called.
            unsafe { module.free_memory() };
            LIVE_MODULES.fetch_sub(1, Ordering::Relaxed);
            LIVE_CODE_BYTES.fetch_sub(self.code_bytes, Ordering::Relaxed);
        }
    }
}

/// The host ISA, built once per code model: Cranelift's native detection (every feature
/// the running CPU has), with [`finish_isa`]'s flags. The JIT uses absolute addresses
/// (`pic = false`); object files use position-independent code, so that they link into PIE
/// executables and shared libraries.
pub(crate) fn isa(pic: bool) -> Result<OwnedTargetIsa> {
    static ISA: [OnceLock<Result<OwnedTargetIsa>>; 2] = [OnceLock::new(), OnceLock::new()];
    ISA[usize::from(pic)]
        .get_or_init(|| host_isa(cranelift_native::builder(), pic))
        .clone()
}

/// The host ISA from Cranelift's detection of the host (`detected`), or an
/// [`Error::Target`] for `host` that names the machine and what Cranelift lacks for it (no
/// back end for its architecture, or a CPU feature every back end needs).
fn host_isa(detected: Result<isa::Builder, &'static str>, pic: bool) -> Result<OwnedTargetIsa> {
    let unavailable = |why: String| Error::Target {
        target: "host".to_string(),
        message: format!(
            "cranelift cannot generate code for this machine ({}): {why}",
            Triple::host()
        ),
    };
    let builder = detected.map_err(|why| unavailable(why.to_string()))?;
    finish_isa(&builder, pic).map_err(unavailable)
}

/// The ISA `builder` describes (a triple and its CPU features, the host's or a target's)
/// with the flags every scatterjit function is compiled under: no e-graph optimization,
/// `pic` for position-independent code, `memcpy` called through the GOT or PLT (it may live
/// in a shared C library), and in debug builds the verifier on every function.
pub(crate) fn finish_isa(builder: &isa::Builder, pic: bool) -> Result<OwnedTargetIsa, String> {
    let mut flags = settings::builder();
    let set = |f: &mut settings::Builder, k: &str, v: &str| {
        f.set(k, v).map_err(|e| format!("setting {k}={v}: {e}"))
    };
    set(&mut flags, "opt_level", "none")?;
    set(&mut flags, "is_pic", if pic { "true" } else { "false" })?;
    set(&mut flags, "use_colocated_libcalls", "false")?;
    set(
        &mut flags,
        "enable_verifier",
        if cfg!(debug_assertions) {
            "true"
        } else {
            "false"
        },
    )?;
    builder
        .finish(settings::Flags::new(flags))
        .map_err(|e| e.to_string())
}

/// What the lowering may emit for `isa` (see [`Machine`]). The 16-byte vectors are SSE2
/// on x86-64 and Advanced SIMD on AArch64, both part of the base architecture; RISC-V has
/// them only with its V extension.
fn machine(isa: &dyn TargetIsa, config: TargetFrontendConfig) -> Machine {
    let flag = |name: &str| {
        isa.isa_flags()
            .iter()
            .any(|f| f.name == name && f.as_bool() == Some(true))
    };
    let vectors = match isa.triple().architecture {
        Architecture::X86_64 | Architecture::Aarch64(_) => true,
        Architecture::Riscv64(_) => flag("has_v"),
        _ => false,
    };
    Machine {
        config,
        vectors,
        prefetch: None,
        f16_table: None,
        stream: None,
    }
}

/// The signature of every pass: `(operands: ptr, params: ptr) -> i64` (see `crate::abi`).
pub(crate) fn pass_signature<M: Module>(module: &M) -> Signature {
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(ptr));
    sig.params.push(AbiParam::new(ptr));
    sig.returns.push(AbiParam::new(types::I64));
    sig
}

/// Where compiled code will run, which decides what it may call besides `memcpy`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CodeHome {
    /// In this process (the JIT): it may call the host's prefetch and streaming helpers
    /// and read its f16 table.
    Process,
    /// In an object file linked elsewhere: it calls nothing of ours.
    Object,
}

/// Declares pass `kind` of `plan` in `variant` as function `name` of `module` and defines it
/// with the one lowering ([`codegen::build_pass`]): the path from a loop nest to machine
/// code, for the JIT and object files alike. `listed`: the outermost loop walks a row list
/// (see `crate::engine`); `bounds`: whether it checks its indices (see
/// [`codegen::Bounds`]); `home` is where the code will run. Returns the function's id and machine code size; with `listing`,
/// also its CLIF before and after optimization and its disassembly.
#[allow(clippy::too_many_arguments)]
pub(crate) fn define_pass<M: Module>(
    module: &mut M,
    plan: &Plan,
    kind: PassKind,
    variant: Variant,
    listed: bool,
    bounds: Bounds,
    name: &str,
    home: CodeHome,
    listing: bool,
) -> Result<(FuncId, usize, Option<Listing>)> {
    let key = plan.key;
    let codegen_error = |message: String, clif: String| Error::Codegen {
        key: name.to_string(),
        message,
        clif,
    };
    let nest = plan.pass(kind).ok_or_else(|| {
        codegen_error(
            format!("the plan has no {} pass", kind.name()),
            String::new(),
        )
    })?;
    let declare_error =
        |e: cranelift_module::ModuleError| codegen_error(e.to_string(), String::new());
    let sig = pass_signature(module);
    let id = module
        .declare_function(name, Linkage::Local, &sig)
        .map_err(declare_error)?;
    let prefetch = match home {
        CodeHome::Process if prefetch::address().is_some() => {
            let sig = codegen::prefetch_helper_signature(module.target_config());
            let helper = module
                .declare_function(prefetch::SYMBOL, Linkage::Import, &sig)
                .map_err(declare_error)?;
            let from_bytes = module
                .declare_data(prefetch::FROM_SYMBOL, Linkage::Import, false, false)
                .map_err(declare_error)?;
            Some(Prefetch {
                helper: helper.as_u32(),
                from_bytes: from_bytes.as_u32(),
            })
        }
        _ => None,
    };
    let stream = match home {
        CodeHome::Process if variant == Variant::Streamed && stream::address().is_some() => {
            let sig = codegen::stream_helper_signature(module.target_config());
            let helper = module
                .declare_function(stream::SYMBOL, Linkage::Import, &sig)
                .map_err(declare_error)?;
            Some(helper.as_u32())
        }
        _ => None,
    };
    let f16_table = match home {
        CodeHome::Process if f16_table::serves(&key) => Some(
            module
                .declare_data(f16_table::SYMBOL, Linkage::Import, false, false)
                .map_err(declare_error)?
                .as_u32(),
        ),
        _ => None,
    };
    let (mut ctx, mut fctx) = CONTEXTS
        .with(Cell::take)
        .unwrap_or_else(|| (Context::new(), FunctionBuilderContext::new()));
    let defined = (|| {
        ctx.func.signature = sig;
        ctx.func.name = UserFuncName::user(0, id.as_u32());
        {
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            let mut machine = machine(module.isa(), module.target_config());
            machine.prefetch = prefetch;
            machine.f16_table = f16_table;
            machine.stream = stream;
            codegen::build_pass(&mut b, &key, nest, variant, machine, listed, bounds);
            b.finalize(module.target_config());
        }
        // Rendering CLIF costs about a quarter of a compile: only for listings and errors.
        let clif = listing.then(|| ctx.func.display().to_string());
        if cfg!(debug_assertions) || listing {
            verify_function(&ctx.func, module.isa()).map_err(|errors| {
                codegen_error(errors.to_string(), ctx.func.display().to_string())
            })?;
        }
        ctx.set_disasm(listing);
        if let Err(e) = module.define_function(id, &mut ctx) {
            // The function as far as Cranelift got with it.
            return Err(codegen_error(
                format!("{e:?}"),
                ctx.func.display().to_string(),
            ));
        }
        let text = clif.map(|clif| Listing {
            pass: Some(kind),
            variant: variant.name(),
            clif,
            optimized: ctx.func.display().to_string(),
            asm: ctx
                .compiled_code()
                .and_then(|c| c.vcode.clone())
                .unwrap_or_default(),
        });
        let code_bytes = ctx.compiled_code().map_or(0, |c| c.code_buffer().len());
        Ok((id, code_bytes, text))
    })();
    ctx.clear();
    CONTEXTS.with(|c| c.set(Some((ctx, fctx))));
    defined
}

thread_local! {
    /// The Cranelift contexts of the thread's latest compile, for its next (see
    /// [`Context::new`]: reused, they skip most of a compile's allocations).
    static CONTEXTS: Cell<Option<(Context, FunctionBuilderContext)>> = const { Cell::new(None) };
}

/// Compiles pass `kind` of `plan` in `variant` (its outermost loop `listed` or not, its
/// indices checked or not, see [`define_pass`]) into a fresh module. With `listing`, also
/// returns its CLIF before and after optimization and its disassembly.
pub(crate) fn compile(
    plan: &Plan,
    kind: PassKind,
    variant: Variant,
    listed: bool,
    bounds: Bounds,
    listing: bool,
) -> Result<(Code, Option<Listing>)> {
    let mut builder = JITBuilder::with_isa(isa(false)?, default_libcall_names());
    if let Some(address) = prefetch::address() {
        builder.symbol(prefetch::SYMBOL, address);
        builder.symbol(prefetch::FROM_SYMBOL, prefetch::from_address());
    }
    if let Some(address) = stream::address() {
        builder.symbol(stream::SYMBOL, address);
    }
    if f16_table::serves(&plan.key) {
        builder.symbol(f16_table::SYMBOL, f16_table::address());
    }
    let mut module = JITModule::new(builder);
    let listed_suffix = if listed { ".listed" } else { "" };
    let bounds_suffix = match bounds {
        Bounds::Checked => "",
        Bounds::InRange => ".in_range",
    };
    let name = format!(
        "{}.{}.{}{listed_suffix}{bounds_suffix}",
        plan.key,
        kind.name(),
        variant.name()
    );
    let (id, code_bytes, text) = define_pass(
        &mut module,
        plan,
        kind,
        variant,
        listed,
        bounds,
        &name,
        CodeHome::Process,
        listing,
    )?;
    module.finalize_definitions().map_err(|e| Error::Codegen {
        key: name.clone(),
        message: e.to_string(),
        clif: String::new(),
    })?;
    let address = module.get_finalized_function(id);
    // SAFETY: `address` is the finalized code of the function declared above with the
    // signature (ptr, ptr) -> i64 in the host's default calling convention, which is
    // `extern "C"`; the code lives as long as `module`, which `Code` owns.
    let entry = unsafe { std::mem::transmute::<*const u8, PassFn>(address) };
    LIVE_MODULES.fetch_add(1, Ordering::Relaxed);
    LIVE_CODE_BYTES.fetch_add(code_bytes, Ordering::Relaxed);
    Ok((
        Code {
            module: Mutex::new(Some(module)),
            entry,
            code_bytes,
        },
        text,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_cranelift_cannot_target_is_a_target_error() {
        let Err(e) = host_isa(Err("unsupported architecture"), false) else {
            panic!("an ISA without a back end");
        };
        assert!(
            matches!(&e, Error::Target { target, .. } if target == "host"),
            "{e:?}"
        );
        let message = e.to_string();
        assert!(
            message.starts_with("target host: cranelift cannot generate code for this machine"),
            "{message}"
        );
        assert!(message.contains(&Triple::host().to_string()), "{message}");
        assert!(message.ends_with(": unsupported architecture"), "{message}");
        assert!(host_isa(cranelift_native::builder(), true).is_ok());
    }

    /// A scatter of whole rows through a broadcast index (GNN message passing as PyTorch
    /// Geometric calls it) prefetches, per row, the destination row the index picks and
    /// the update row it reads, in order and under the engine's row list alike.
    #[test]
    fn broadcast_rows_prefetch_their_destination_and_their_source() {
        use crate::abi::{ParamLayout, Picks, Still};
        use scatterjit_ir::{DType, KernelKey, Operand, Reduction};

        let key = KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, Reduction::Max, true)
            .unwrap();
        let plan = Plan::new(key);
        let nest = plan.pass(PassKind::Apply).unwrap();
        let accesses = ParamLayout::of(nest).accesses;
        let at = |operand| accesses.iter().position(|a| a.operand == operand).unwrap();
        let variant = Variant::Broadcast(Still(1 << at(Operand::Indices)), Picks::Strided);
        let per_row = if prefetch::address().is_some() { 2 } else { 0 };
        for listed in [false, true] {
            let (_, listing) = compile(
                &plan,
                PassKind::Apply,
                variant,
                listed,
                Bounds::Checked,
                true,
            )
            .unwrap();
            let clif = listing.unwrap().clif;
            // The helper returns nothing: its calls are statements of their own.
            let calls = clif
                .lines()
                .filter(|l| l.trim_start().starts_with("call "))
                .count();
            assert_eq!(calls, per_row, "listed {listed}:\n{clif}");
        }
    }

    /// A pass compiled for indices in range has no branch to the bad-index exit: one branch
    /// fewer per index read than the checked pass, in every variant.
    #[test]
    fn passes_on_indices_in_range_skip_the_check() {
        use scatterjit_ir::{DType, KernelKey, Reduction};

        let key = KernelKey::scatter_elements(DType::F32, DType::U16, 2, 1, Reduction::Add, true)
            .unwrap();
        let plan = Plan::new(key);
        let branches = |variant, bounds| {
            let (_, listing) =
                compile(&plan, PassKind::Apply, variant, false, bounds, true).unwrap();
            let clif = listing.unwrap().clif;
            clif.lines().filter(|l| l.contains("brif")).count()
        };
        for variant in Variant::ALL {
            let checked = branches(variant, Bounds::Checked);
            let in_range = branches(variant, Bounds::InRange);
            assert!(
                in_range < checked,
                "{variant:?}: {in_range} and {checked} branches"
            );
        }
    }
}
