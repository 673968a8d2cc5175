//! Loop emission: the counted loops of the nest (pointers stepped by each access's stride),
//! a listed pass's outermost loop over its row list, and the bottom-tested ranges the
//! contiguous variant's rows use.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::Variable;

use super::ahead::ROWS_AHEAD;
use super::Lowering;
use crate::abi::Variant;

impl Lowering<'_, '_> {
    /// Emits loop `n` (or the body once all loops are open); `ptrs` are the accesses'
    /// addresses at the start of this level.
    pub(super) fn level(&mut self, n: usize, ptrs: &[Value]) {
        if n == self.depth {
            self.body(ptrs);
            return;
        }
        if n == 0 && self.listed {
            self.listed_level(ptrs);
            return;
        }
        let innermost = n + 1 == self.depth;
        if innermost {
            if matches!(self.variant, Variant::Touched(_)) {
                self.read_lines_ahead(ptrs);
            }
            self.enter_innermost();
            if self.variant.rows() {
                self.inner_dim = Some(self.param(n));
                self.contiguous_inner(ptrs);
                return;
            }
        }
        // The innermost loop keeps its dim and strides in registers; outer loops reload
        // theirs from the parameter block at each step.
        let steady = innermost.then(|| (self.param(n), self.byte_strides(n)));
        let counter = self.b.declare_var(types::I64);
        self.counters.push(counter);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.def_var(counter, zero);
        let ptr_vars: Vec<Variable> = ptrs
            .iter()
            .map(|&p| {
                let var = self.b.declare_var(self.ptr);
                self.b.def_var(var, p);
                var
            })
            .collect();
        let limit = (n + 2 == self.depth)
            .then(|| self.prefetch_limit(n, false))
            .flatten();
        let header = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(header, &[]);
        self.open_loop(header);
        let current: Vec<Value> = ptr_vars.iter().map(|&v| self.b.use_var(v)).collect();
        let i = self.b.use_var(counter);
        let outer = self.outer_vars.len();
        self.outer_vars.push(counter);
        self.outer_vars.extend(&ptr_vars);
        if let Some(limit) = limit {
            self.prefetch_ahead(i, limit, false, |s, _| {
                let steps = s.b.ins().iconst(types::I64, ROWS_AHEAD);
                s.stepped(&current, steps, n)
            });
        }
        self.level(n + 1, &current);
        self.outer_vars.truncate(outer);

        let (dim, strides) = match &steady {
            Some((dim, strides)) => (*dim, strides.clone()),
            None => (self.param(n), self.byte_strides(n)),
        };
        // The loop changes its counter and pointers here only: step the header's values.
        let next = self.b.ins().iadd_imm_s(i, 1);
        self.b.def_var(counter, next);
        for ((&var, &p), &stride) in ptr_vars.iter().zip(&current).zip(&strides) {
            let stepped = self.b.ins().iadd(p, stride);
            self.b.def_var(var, stepped);
        }
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, next, dim);
        self.b.ins().brif(more, header, &[], exit, &[]);
        self.b.seal_block(header);
        self.enter(exit);
    }

    /// The outermost loop of a listed pass: `j` counts to `dim_0` and the loop's position
    /// is `list[j]`, each access's pointer recomputed from its base at every step.
    fn listed_level(&mut self, ptrs: &[Value]) {
        let counter = self.b.declare_var(types::I64);
        self.counters.push(counter);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.def_var(counter, zero);
        // Where loops run between the list and the row, the bind has merged the slice
        // into the row or they are one-step loops: the row is the list entry's slice, or
        // its first row, which still helps.
        let limit = (self.depth >= 2)
            .then(|| self.prefetch_limit(0, true))
            .flatten();
        let header = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(header, &[]);
        self.open_loop(header);
        let j = self.b.use_var(counter);
        let outer = self.outer_vars.len();
        self.outer_vars.push(counter);
        let list = self.param(self.layout.list_at);
        let position = self.listed_position(list, j);
        let current = self.stepped(ptrs, position, 0);
        if let Some(limit) = limit {
            self.prefetch_ahead(j, limit, true, |s, later| {
                let position = s.listed_position(list, later);
                s.stepped(ptrs, position, 0)
            });
        }
        if self.depth == 1 {
            self.enter_innermost();
            self.body(&current);
        } else {
            self.level(1, &current);
        }
        self.outer_vars.truncate(outer);
        let dim = self.param(0);
        let next = self.b.ins().iadd_imm_s(j, 1);
        self.b.def_var(counter, next);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, next, dim);
        self.b.ins().brif(more, header, &[], exit, &[]);
        self.b.seal_block(header);
        self.enter(exit);
    }

    /// Entry `j` of the row list at `list`: the position of a listed pass's `j`th row.
    pub(super) fn listed_position(&mut self, list: Value, j: Value) -> Value {
        let offset = self.b.ins().ishl_imm_s(j, 3);
        let at = self.b.ins().iadd(list, offset);
        // The list is the engine's own buffer: aligned and valid for `dim_0` entries.
        self.b
            .ins()
            .load(types::I64, MemFlagsData::trusted(), at, 0)
    }

    /// `ptrs` moved `steps` steps along loop `n`.
    fn stepped(&mut self, ptrs: &[Value], steps: Value, n: usize) -> Vec<Value> {
        let strides = self.byte_strides(n);
        ptrs.iter()
            .zip(strides)
            .map(|(&p, stride)| {
                let step = self.b.ins().imul(steps, stride);
                self.b.ins().iadd(p, step)
            })
            .collect()
    }

    /// Emits `i = start; while i + step <= end { body(i); i += step }` as one test in
    /// front and a bottom-tested loop (one taken branch per iteration); returns the
    /// final `i`.
    pub(super) fn for_range(
        &mut self,
        start: Value,
        end: Value,
        step: i64,
        mut body: impl FnMut(&mut Self, Value),
    ) -> Value {
        let var = self.b.declare_var(types::I64);
        self.b.def_var(var, start);
        let (work, exit) = (self.b.create_block(), self.b.create_block());
        // `i + step <= end` as `i <= end - step`: one compare per iteration, no add. Ends
        // are dims or byte counts, far from i64's bounds.
        let last = self.b.ins().iadd_imm_s(end, -step);
        let any = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, start, last);
        self.b.ins().brif(any, work, &[], exit, &[]);
        self.open_loop(work);
        let i = self.b.use_var(var);
        body(self, i);
        let next = self.b.ins().iadd_imm_s(i, step);
        self.b.def_var(var, next);
        let more = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, next, last);
        self.b.ins().brif(more, work, &[], exit, &[]);
        self.b.seal_block(work);
        self.enter(exit);
        self.b.use_var(var)
    }
}
