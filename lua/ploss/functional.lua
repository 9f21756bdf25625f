--- ploss.F: the functional API, for scripts that want no criterion objects.
--
-- Every loss declared through ploss.nn.register (see ploss/nn.lua) adds three functions:
--   ploss.F.<name>(input, target [, opts])            → loss
--       a Lua number when reduced (a host read: it synchronises), a tensor for
--       reduction = 'none'; with opts.out = a loss tensor, it is written and returned
--       without synchronising.
--   ploss.F.<name>_backward(input, target, grad_output [, opts]) → grad_input
--       grad_output: a number or one-element tensor (reduced), a tensor of the loss's shape
--       ('none'; nil = ones).  opts.grad_input: a buffer to write into.
--   ploss.F.<name>_fused(input, target [, opts])      → loss, grad_input
--       one pass; opts.scale multiplies the gradient (default 1), opts.inplace = true writes
--       the gradient over input (and returns input; the other two refuse it),
--       opts.out / opts.grad_input: buffers.
-- `opts` takes the criterion's options (reduction, weight, …).  Nothing is cached between
-- calls: backward recomputes the per-sample state from the input.
--
-- e.g. ploss.F.cross_entropy(logits, labels, {label_smoothing = 0.1})
return function(ploss)
  ploss.F = ploss.F or {}
end
