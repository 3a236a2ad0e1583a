## Per-pixel terms of the patch distances: L2 (squared difference) or L1 (absolute
## difference), accumulated into a float. Distances are plain sums over the patch and
## its channels, not normalised, so every variant is checked against NumPy exactly.
<%def name="accumulate(metric, acc, a, b)">
% if metric == "l2":
{ const float diff_ = (${a}) - (${b}); ${acc} += diff_ * diff_; }
% elif metric == "l1":
${acc} += fabs((${a}) - (${b}));
% else:
<% raise ValueError("metric must be 'l2' or 'l1', got %r" % (metric,)) %>
% endif
</%def>
