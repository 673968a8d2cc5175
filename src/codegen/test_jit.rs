//! Compiles one small function for the unit tests of the code generator's pieces, under
//! the flags every kernel is compiled with and with the verifier on.

use cranelift_codegen::ir::{AbiParam, InstBuilder, Type, Value};
use cranelift_codegen::verify_function;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};

/// A compiled function: its module keeps the code mapped (nothing calls `free_memory`).
pub(crate) struct Jitted {
    _module: JITModule,
    /// The entry, in the host's default calling convention (the platform C ABI).
    pub(crate) entry: *const u8,
}

/// Compiles `fn(params) -> returns` whose body `emit` builds from the parameters; `emit`
/// returns the values to return.
///
/// # Panics
/// When the verifier or Cranelift rejects the function.
pub(crate) fn compile(
    params: &[Type],
    returns: &[Type],
    emit: impl FnOnce(&mut FunctionBuilder, &[Value]) -> Vec<Value>,
) -> Jitted {
    let isa = crate::jit::isa(false).expect("an ISA for the host");
    let mut module = JITModule::new(JITBuilder::with_isa(isa, default_libcall_names()));
    let mut ctx = module.make_context();
    let signature = &mut ctx.func.signature;
    signature
        .params
        .extend(params.iter().map(|&t| AbiParam::new(t)));
    signature
        .returns
        .extend(returns.iter().map(|&t| AbiParam::new(t)));

    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let args = b.block_params(block).to_vec();
    let results = emit(&mut b, &args);
    b.ins().return_(&results);
    b.finalize(module.target_config());
    if let Err(e) = verify_function(&ctx.func, module.isa()) {
        panic!("verifier errors:\n{e}\nin\n{}", ctx.func.display());
    }
    let id = module
        .declare_function("under_test", Linkage::Local, &ctx.func.signature)
        .expect("declare");
    module.define_function(id, &mut ctx).expect("define");
    module.clear_context(&mut ctx);
    module.finalize_definitions().expect("finalize");
    let entry = module.get_finalized_function(id);
    Jitted {
        _module: module,
        entry,
    }
}
