## Per-pixel terms of the patch distances: L2 (squared difference) or L1 (absolute
## difference), accumulated into a float. Distances are plain sums over the patch and
## its channels, not normalised, so every variant is checked against NumPy exactly.
## L2 adds each square by an explicit fma(), one rounding per term on every compiler: left
## to FP_CONTRACT, Intel's CPU compiler fused it in some specialisations of a kernel and not
## in others, so a search split in row bands rounded float images differently from the
## same search in one pass. NVIDIA's and PoCL's compilers fused it already (same bits).
<%def name="accumulate(metric, acc, a, b)">
% if metric == "l2":
{ const float diff_ = (${a}) - (${b}); ${acc} = fma(diff_, diff_, ${acc}); }
% elif metric == "l1":
${acc} += fabs((${a}) - (${b}));
% else:
<% raise ValueError("metric must be 'l2' or 'l1', got %r" % (metric,)) %>
% endif
</%def>
