"""The mutation benchmark's third-party catalogue (benchmarks/mutants.py --third-party), as data."""

# Hand-written backward passes of libraries nobody on the team wrote (``--third-party``): the
# module whose backward is mutated, and the layer built on it, as (name, module, layer source,
# layouts). The layer source is ours: it loads the copy of the module beside it (``SIBLING``),
# so each mutant's copy is the one used.
THIRD_PARTY = [
    ("entmax sparsemax", "entmax.activations", "class LAYER(M.Sparsemax):\n    def __init__(self):\n"
     "        super().__init__(dim=-1)", ("3,5:BC",)),
    ("entmax entmax15", "entmax.activations", "class LAYER(M.Entmax15):\n    def __init__(self):\n"
     "        super().__init__(dim=-1)", ("3,5:BC",)),
    ("entmax bisect, learned alpha", "entmax.root_finding",
     "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.alpha = nn.Parameter(torch.tensor(1.3))\n\n    def forward(self, x):\n"
     "        return M.entmax_bisect(x, self.alpha, dim=-1)", ("3,5:BC",)),
    ("entmax sparsemax_bisect", "entmax.root_finding", "class LAYER(M.SparsemaxBisect):\n    def __init__(self):\n"
     "        super().__init__(dim=-1)", ("3,5:BC",)),
    ("entmax normmax_bisect", "entmax.root_finding", "class LAYER(M.NormmaxBisect):\n    def __init__(self):\n"
     "        super().__init__(alpha=2, dim=-1)", ("3,5:BC",)),
    ("entmax budget_bisect", "entmax.root_finding", "class LAYER(M.BudgetBisect):\n    def __init__(self):\n"
     "        super().__init__(budget=2, dim=-1)", ("3,5:BC",)),
    *[(f"memory-efficient-attention flash{', causal' if causal else ''}",
       "memory_efficient_attention_pytorch.flash_attention",
       "class LAYER(M.FlashAttention):\n    def __init__(self):\n        super().__init__(dim=6, heads=2, "
       f"dim_head=3, causal={causal}, q_bucket_size=2, k_bucket_size=3)", ("2,5,6:BTC",))
      for causal in (False, True)],
    # one key bucket and scale 8: with several buckets, or at its default scale 16, the
    # original's gradient is wrong (gradcheck in float64 agrees), and no mutant could be judged
    ("memory-efficient-attention cosine flash", "memory_efficient_attention_pytorch.cosine_sim_flash_attention",
     "class LAYER(M.FlashAttention):\n    def __init__(self):\n        super().__init__(dim=6, scale=8, heads=2, "
     "dim_head=3, q_bucket_size=2, k_bucket_size=8)", ("2,5,6:BTC",)),
    # zero padding: with "symmetric" or "reflect" the original's gradient is wrong (gradcheck agrees)
    ("pytorch_wavelets AFB1D (zero padding)", "pytorch_wavelets.dwt.lowlevel",
     "import pywt\n\n\nclass LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        wavelet = pywt.Wavelet('db2')\n        h0, h1 = M.prep_filt_afb1d(wavelet.dec_lo, wavelet.dec_hi)\n"
     "        self.register_buffer('h0', h0)\n        self.register_buffer('h1', h1)\n\n"
     "    def forward(self, x):\n        return M.AFB1D.apply(x, self.h0, self.h1, M.mode_to_int('zero'))",
     ("2,3,12:BCT",)),
    ("pytorch_wavelets AFB2D (zero padding)", "pytorch_wavelets.dwt.lowlevel",
     "import pywt\n\n\nclass LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        wavelet = pywt.Wavelet('db2')\n"
     "        filters = M.prep_filt_afb2d(wavelet.dec_lo, wavelet.dec_hi, wavelet.dec_lo, wavelet.dec_hi)\n"
     "        for name, value in zip(('h0_col', 'h1_col', 'h0_row', 'h1_row'), filters):\n"
     "            self.register_buffer(name, value)\n\n"
     "    def forward(self, x):\n        return M.AFB2D.apply(x, self.h0_col, self.h1_col, self.h0_row, self.h1_row, "
     "M.mode_to_int('zero'))", ("2,2,6,6:BCSS",)),
    # a sequence length that is not a power of two: the padded path
    ("mambapy PScan (parallel scan)", "mambapy.pscan",
     "class LAYER(nn.Module):\n    def forward(self, a, x):\n        return M.PScan.apply(a, x)",
     ("2,5,3,2:BTCU values=0:1", "2,5,3,2:BTCU")),
    ("monai MemoryEfficientSwish", "monai.networks.blocks.activation", "LAYER = M.MemoryEfficientSwish",
     ("2,3,4,4:BCSS",)),
    # GP linear algebra: a solve and an inverse quadratic form with a positive definite matrix,
    # through the library's operator with the mutated Function in place of its own for the call
    # (its InvQuadLogdet is left out: below 800 rows it takes a Cholesky path that never calls it)
    *[(f"linear_operator {name}", f"linear_operator.functions._{module}",
       "import linear_operator.operators._linear_operator as _base\n"
       "from linear_operator.operators import DenseLinearOperator\n\n\n"
       "class LAYER(nn.Module):\n    def forward(self, a, b):\n"
       f"        original, _base.{name} = _base.{name}, M.{name}\n        try:\n"
       "            k = DenseLinearOperator(a @ a.mT + torch.eye(a.shape[-1], dtype=a.dtype, device=a.device))\n"
       f"            return {call}\n        finally:\n            _base.{name} = original",
       ("5,5:UU", "5,2:UU"))
      for name, module, call in (("Solve", "solve", "k.solve(b)"), ("InvQuad", "inv_quad", "k.inv_quad(b)"))],
    # reversible stacks: the Function's backward and each block's backward_pass, which rebuilds
    # the block's input from its output and sets its parameters' gradients by side effect
    ("revtorch ReversibleSequence", "revtorch.revtorch",
     "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.blocks = M.ReversibleSequence(nn.ModuleList([M.ReversibleBlock(nn.Linear(3, 3), nn.Sequential(\n"
     "            nn.Linear(3, 3), nn.Tanh())) for _ in range(2)]))\n\n"
     "    def forward(self, x):\n        return self.blocks(x)", ("3,6:BC",)),
    ("reformer-pytorch ReversibleSequence", "reformer_pytorch.reversible",
     "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.blocks = M.ReversibleSequence(nn.ModuleList([nn.ModuleList([nn.Linear(3, 3), nn.Sequential(\n"
     "            nn.Linear(3, 3), nn.Tanh())]) for _ in range(2)]))\n\n"
     "    def forward(self, x):\n        return self.blocks(x)", ("2,4,6:BTC",)),
    *[(f"timm {name}", "timm.layers.activations_me", f"LAYER = M.{name}", ("2,3,4,4:BCSS",))
      for name in ("SwishMe", "MishMe", "HardSigmoidMe", "HardSwishMe", "HardMishMe")],
    # the nearest rotation to a 3x3 matrix, by SVD and by Horn's quaternion eigenvector (each
    # path calls one of the module's Functions; without regularization, whose backward adds a
    # term that is by design no gradient)
    *[(f"roma special_procrustes ({method})", "roma.mappings",
       f"class LAYER(nn.Module):\n    def forward(self, m):\n        return M.special_procrustes(m, method={method!r})",
       ("2,3,3:BUU",))
      for method in ("svd", "horn")],
    # a linear-chain CRF's log partition under the checkpointing semiring, built at each call
    # (the semiring is a local class, which a layer holding it could not be pickled with), of a
    # copy of the input: torch_struct calls requires_grad_() on the log-potentials it is given,
    # which layercheck's input_unchanged reports on the caller's tensor
    ("torch_struct CheckpointSemiring(LogSemiring)", "torch_struct.semirings.checkpoint",
     "import torch_struct\n\n\nclass LAYER(nn.Module):\n    def forward(self, log_potentials):\n"
     "        chain = torch_struct.LinearChain(M.CheckpointSemiring(torch_struct.LogSemiring))\n"
     "        return chain.sum(log_potentials.clone())", ("2,3,2,2:BUUU",)),
    # a neural ODE block through the adjoint method, fixed-step rk4, with time-dependent dynamics,
    # returning the states at two times (its backward solves the adjoint ODE on the same grid,
    # interval by interval, adding each time's incoming gradient; the module's relative imports
    # find torchdiffeq's own, see third_party). The dynamics hold the parameters of the call: the
    # backward calls them after the call has returned, when torch.func.functional_call
    # (gradcheck's, here) has put the layer's own back, and a dynamics module reading its own
    # would give zero parameter gradients.
    ("torchdiffeq odeint_adjoint (rk4)", "torchdiffeq._impl.adjoint",
     "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.hidden = nn.Linear(3, 4)\n        self.out = nn.Linear(4, 3)\n\n"
     "    def forward(self, x):\n"
     "        params = (self.hidden.weight, self.hidden.bias, self.out.weight, self.out.bias)\n\n"
     "        def dynamics(t, y):\n"
     "            return nn.functional.linear(torch.tanh(nn.functional.linear(y, *params[:2]) + t), *params[2:])\n\n"
     "        t = torch.tensor([0.0, 0.5, 1.0], dtype=x.dtype, device=x.device)\n"
     "        states = M.odeint_adjoint(dynamics, x, t, method='rk4', options={'step_size': 0.25}, "
     "adjoint_params=params)\n"
     "        return torch.cat((states[1], states[2]), dim=-1)", ("2,3:BC",)),
    # three dimensions: the backward flattens all but the last, as the forward does
    ("sparsemax Sparsemax", "sparsemax.sparsemax", "class LAYER(M.Sparsemax):\n    def __init__(self):\n"
     "        super().__init__(dim=-1)", ("2,3,5:BTC",)),
    # on a copy of the input: tabnet's sparsemax subtracts the row maxima in place from the tensor
    # it is given, the caller's (input_unchanged fails the original on it, and gradcheck's slow
    # mode, whose finite differences it shifts)
    ("pytorch_tabnet Sparsemax", "pytorch_tabnet.sparsemax", "class LAYER(M.Sparsemax):\n    def __init__(self):\n"
     "        super().__init__(dim=-1)\n\n    def forward(self, x):\n        return super().forward(x.clone())",
     ("3,5:BC",)),
    ("pytorch_tabnet Entmax15", "pytorch_tabnet.sparsemax", "class LAYER(M.Entmax15):\n    def __init__(self):\n"
     "        super().__init__(dim=-1)", ("3,5:BC",)),
    # GP covariances as gpytorch's RBFKernel and MaternKernel call them where the points take no
    # gradient (the Functions refuse points that do): a gradient for the lengthscale only, kept
    # positive by softplus
    ("gpytorch RBFCovariance", "gpytorch.functions.rbf_covariance",
     "from gpytorch.kernels.kernel import sq_dist\n\n\nclass LAYER(nn.Module):\n    def __init__(self):\n"
     "        super().__init__()\n        self.raw_lengthscale = nn.Parameter(torch.tensor([[0.5]]))\n\n"
     "    def forward(self, x1, x2):\n"
     "        return M.RBFCovariance.apply(x1, x2, nn.functional.softplus(self.raw_lengthscale), sq_dist)",
     ("4,2:UU grad=no", "3,2:UU grad=no")),
    *[(f"gpytorch MaternCovariance (nu={nu})", "gpytorch.functions.matern_covariance",
       "from gpytorch.kernels.kernel import dist\n\n\nclass LAYER(nn.Module):\n    def __init__(self):\n"
       "        super().__init__()\n        self.raw_lengthscale = nn.Parameter(torch.tensor([[0.5]]))\n\n"
       "    def forward(self, x1, x2):\n"
       f"        return M.MaternCovariance.apply(x1, x2, nn.functional.softplus(self.raw_lengthscale), {nu}, dist)",
       ("4,2:UU grad=no", "3,2:UU grad=no"))
      for nu in (0.5, 1.5, 2.5)],
    # z in [-1, 2): below -1 the forward is a rational approximation whose own derivative differs
    # from the backward's by 0.05-0.7% (on normal inputs gradcheck's slow mode and layercheck's
    # gradient check fail the original)
    ("gpytorch LogNormalCDF", "gpytorch.functions._log_normal_cdf",
     "class LAYER(nn.Module):\n    def forward(self, z):\n        return M.LogNormalCDF.apply(z)",
     ("4,6:BC values=uniform:-1:2",)),
    ("e3nn soft_unit_step", "e3nn.math._soft_unit_step",
     "class LAYER(nn.Module):\n    def forward(self, x):\n        return M.soft_unit_step(x)", ("2,3,4:BCT",)),
    # losses whose backward gives no gradient for the target: the target is declared grad=no
    ("torch_einops_utils soft-target CE", "torch_einops_utils.stable_softmax",
     "class LAYER(nn.Module):\n    def forward(self, logits, target_logits):\n"
     "        return M.soft_target_cross_entropy_from_logits(logits, target_logits)", ("3,5:BC", "3,5:BC grad=no")),
    ("torch_einops_utils categorical_kl", "torch_einops_utils.stable_softmax",
     "class LAYER(nn.Module):\n    def forward(self, p, q):\n        return M.categorical_kl(p, q)",
     ("3,5:BC", "3,5:BC")),
    ("torch_einops_utils soft-target binary CE", "torch_einops_utils.stable_softmax",
     "class LAYER(nn.Module):\n    def forward(self, logits, target_logits):\n"
     "        return M.soft_target_binary_cross_entropy(logits, target_logits)", ("3,4:BC", "3,4:BC grad=no")),
    # memcnn's reversible couplings through their memory-saving Functions (implementation 0 keeps
    # the input, 1 rebuilds it from the output; the backward recomputes Fm and Gm). Fm and Gm hold
    # fixed weights in buffers: with one of their parameters frozen the backward raises
    # (torch.autograd.grad over every parameter; needs_input_grad fails the original). Left out,
    # their input gradients wrong (layercheck and gradcheck agree): the additive and affine
    # inverses of implementation 0 (the halves of the gradient swapped: grad of (y2, y1)
    # concatenated for y = (y1, y2)) and the affine coupling of implementation 1, forward and
    # inverse (x2's gradient through y2 = s2 * x2 + t2 taken as if s2 were 1)
    *[(f"memcnn {kind}Coupling{' inverse' if inverse else ''} (impl. {impl})",
       f"memcnn.models.{kind.lower()}",
       "class Fixed(nn.Module):\n    def __init__(self, seed):\n        super().__init__()\n"
       "        generator = torch.Generator().manual_seed(seed)\n"
       "        self.register_buffer('weight', torch.randn(2, 2, generator=generator))\n"
       "        self.register_buffer('bias', torch.randn(2, generator=generator))\n\n"
       "    def forward(self, x):\n        return torch.tanh(nn.functional.linear(x, self.weight, self.bias))\n\n\n"
       "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
       f"        self.coupling = M.{kind}Coupling({module.format('Fixed(1)')}, {module.format('Fixed(2)')}, "
       f"implementation_fwd={impl}, implementation_bwd={impl})\n\n"
       f"    def forward(self, x):\n        return self.coupling.{'inverse' if inverse else 'forward'}(x)",
       ("3,4:BC",))
      for kind, module, impl, inverse in (("Additive", "{}", 0, False), ("Additive", "{}", 1, False),
                                          ("Additive", "{}", 1, True),
                                          ("Affine", "M.AffineAdapterNaive({})", 0, False))],
    # the dual-tree complex wavelet transform's Functions (pytorch_wavelets' DTCWTForward and
    # DTCWTInverse, level 1 and the levels after it) at the library's default symmetric padding,
    # called as those modules call them, with their default filters (biorthogonal near_sym_a,
    # q-shift qshift_a) and orientations in dim 2, real and imaginary parts last
    *[(f"pytorch_wavelets DTCWT {name}", "pytorch_wavelets.dtcwt.transform_funcs",
       "from pytorch_wavelets.dtcwt.coeffs import biort, qshift\n"
       "from pytorch_wavelets.dtcwt.lowlevel import prep_filt\n"
       "from pytorch_wavelets.dwt.lowlevel import mode_to_int\n\n\n"
       "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
       f"        for i, h in enumerate({filters}):\n"
       "            self.register_buffer(f'h{i}', prep_filt(h, 1))\n\n"
       f"    def forward(self, {arguments}):\n"
       f"        return M.{name}.apply({arguments}, *self.buffers(), {flags}2, -1, mode_to_int('symmetric'))",
       layouts)
      for name, filters, arguments, flags, layouts in (
          ("FWD_J1", "[biort('near_sym_a')[i] for i in (0, 2)]", "x", "False, ", ("2,1,4,4:BCSS",)),
          ("FWD_J2PLUS", "[qshift('qshift_a')[i] for i in (0, 4, 1, 5)]", "x", "False, ", ("2,1,4,4:BCSS",)),
          ("INV_J1", "[biort('near_sym_a')[i] for i in (1, 3)]", "lows, highs", "",
           ("2,1,4,4:BCSS", "2,1,6,2,2,2:BCUSSU")),
          ("INV_J2PLUS", "[qshift('qshift_a')[i] for i in (2, 6, 3, 7)]", "lows, highs", "",
           ("2,1,4,4:BCSS", "2,1,6,2,2,2:BCUSSU")))],
    # diffsort's normal CDF (a Function written without @staticmethod), through a differentiable
    # sorting network with the Gaussian relaxation
    ("diffsort NormalCDF (DiffSortNet, gaussian)", "diffsort.functional",
     "import diffsort.diffsort as _net\n\n\nclass LAYER(nn.Module):\n    def __init__(self):\n"
     "        super().__init__()\n        self.net = _net.DiffSortNet('odd_even', 4, steepness=10, "
     "distribution='gaussian')\n\n    def forward(self, x):\n        original, _net.sort = "
     "_net.sort, M.sort\n        try:\n            return self.net(x)\n        finally:\n"
     "            _net.sort = original", ("3,4:BC",)),
    # Hugging Face transformers' hand-written backward passes: SEW-D's (DeBERTa's) masked softmax
    # and dropout, BLOOM's GELU (its backward calls the module's bloom_gelu_back), RecurrentGemma's
    # square root whose derivative is clipped (at 1000, beyond these inputs)
    ("transformers SEW-D XSoftmax", "transformers.models.sew_d.modeling_sew_d",
     "class LAYER(nn.Module):\n    def forward(self, x, mask):\n        return M.XSoftmax.apply(x, mask, -1)",
     ("2,4,6:BTC", "2,4,6:BTC dtype=bool values=0.8")),
    ("transformers SEW-D XDropout (StableDropout)", "transformers.models.sew_d.modeling_sew_d",
     "class LAYER(M.StableDropout):\n    def __init__(self):\n        super().__init__(0.25)", ("2,4,6:BTC",)),
    ("transformers BLOOM GeLUFunction", "transformers.models.bloom.modeling_bloom", "LAYER = M.BloomGelu",
     ("2,4,6:BTC",)),
    ("transformers RecurrentGemma SqrtBoundDerivative", "transformers.models.recurrent_gemma.modeling_recurrent_gemma",
     "class LAYER(nn.Module):\n    def forward(self, x):\n        return M.SqrtBoundDerivative.apply(x)",
     ("2,4,6:BTC values=0.1:1",)),
    # PyPose's Lie group operations: each group's exponential, product, inverse, action on points
    # (3- and 4-vectors), logarithm and adjoint, chained from Lie algebra vectors to points and
    # algebra vectors. Its gradient with respect to a group element is a Lie algebra (tangent)
    # one, so a group element alone as an input or output disagrees with finite differences by
    # design (third_party.py); chained so, every gradient is the ordinary one. Sim(3)'s Jacobians
    # are Taylor series cut after a few terms: exact for small algebra vectors only.
    *[(f"pypose {group} chain (Exp, Mul, Inv, Act, Act4, Log, AdjXa)", "pypose.lietensor.operation",
       "class LAYER(nn.Module):\n    def forward(self, r1, r2, p):\n"
       f"        X = M.{group}_Mul.apply(M.{algebra}_Exp.apply(r1), M.{group}_Inv.apply(M.{algebra}_Exp.apply(r2)))\n"
       f"        return (M.{group}_Act.apply(X, p), M.{group}_Log.apply(X), M.{group}_AdjXa.apply(X, r2),\n"
       f"                M.{group}_Act4.apply(X, torch.cat([p, torch.ones_like(p[..., :1])], -1)))",
       (f"3,{size}:BC{values}", f"3,{size}:BC{values}", "3,3:BC"),
       [f"{algebra}_Exp", *(f"{group}_{op}" for op in ("Mul", "Inv", "Act", "Log", "AdjXa", "Act4"))])
      for group, algebra, size, values in (("SO3", "so3", 3, ""), ("SE3", "se3", 6, ""), ("RxSO3", "rxso3", 4, ""),
                                           ("Sim3", "sim3", 7, " values=-0.05:0.05"))],
    # qpth's quadratic program (OptNet): argmin 1/2 z'Qz + p'z subject to Gz <= h, every tensor
    # batched (an unbatched one gets the mean of its gradients over the batch: third_party.py)
    ("qpth QPFunction (batched, inequalities)", "qpth.qp",
     "class LAYER(nn.Module):\n    def forward(self, p, m, g, z):\n"
     "        q = m @ m.transpose(-1, -2) + torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)\n"
     "        e = torch.empty(0, dtype=p.dtype, device=p.device)\n"
     "        return M.QPFunction(verbose=-1)(q, p, g, (g @ z.unsqueeze(-1)).squeeze(-1) + 1, e, e)",
     ("3,4:BC", "3,4,4:BCU", "3,2,4:BUC", "3,4:BC"), ["QPFunctionFn"]),
    # SpeechBrain's quaternion linear layer with its hand-written backward (Parcollet's thesis):
    # the input's and the four weight components' gradients through the Hamilton product, and
    # the bias's (its original fails needs_input_grad: third_party.py)
    ("speechbrain QuaternionLinearCustomBackward", "speechbrain.nnet.quaternion_networks.q_ops",
     "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        g = torch.Generator().manual_seed(0)\n"
     "        self.r, self.i, self.j, self.k = (nn.Parameter(0.5 * torch.randn(2, 3, generator=g)) for _ in range(4))\n"
     "        self.bias = nn.Parameter(0.1 * torch.randn(12, generator=g))\n\n"
     "    def forward(self, x):\n"
     "        return M.QuaternionLinearCustomBackward.apply(x, self.r, self.i, self.j, self.k, self.bias)",
     ("5,8:BC",), ["QuaternionLinearCustomBackward"]),
]
