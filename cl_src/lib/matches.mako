## The device layout of search results (the Matches contract, clpatch/match/matches.py),
## for every template that writes or reads them:
##
##   reference ref, counted in a launch's [frame][grid row][grid column] order,
##   ref = (frame * gy + row) * gx + col, keeps its n candidates (rank k < n, ascending
##   distance) at entries e = ref * n + k; the distance is dist[e], the position
##   pos[e * dim + c], c = 0, 1 as (y, x) for images (dim 2), c = 0, 1, 2 as (t, y, x) for
##   video (dim 3).
##
## The defs return C text (they are buffered), so they nest:
##   ${mt.pos_y("pos", mt.entry("ref", N, "j"), DIM)}  ->  pos[(ref * 16 + j) * 2]
## Arguments are C expressions as strings (or numbers). A multiplied operand is
## parenthesised unless it is a name or a number; added operands (row, col, k) are emitted
## as they are, so they must not hold operators below + in precedence. A position index is
## spelled `dim * e` for a named entry and `(e) * dim` for an entry expression: the
## spellings of the kernels tuned before this header, kept so that their sources (and
## compiled binaries) stay the same.
##
## Templates include it as the namespace "mt" (file="/lib/matches.mako"), the tag's line
## ending in a backslash: that drops the line's newline, so the rendered source is unchanged.
<%!
    def _factor(expr):
        expr = str(expr)
        return expr if expr.isidentifier() or expr.isdigit() else "(" + expr + ")"

    def _ref(row, col, gx, frame, gy):
        if frame is None:
            return "%s * %s + %s" % (_factor(row), gx, col)
        return "(%s * %s + %s) * %s + %s" % (_factor(frame), gy, row, gx, col)

    def _pos(buf, e, dim, c):
        if dim not in (2, 3) or not 0 <= c < dim:
            raise ValueError("position component %r of dimension %r" % (c, dim))
        e = str(e)
        index = "%s * %s" % (dim, e) if e.isidentifier() else "(%s) * %s" % (e, dim)
        return "%s[%s%s]" % (buf, index, " + %d" % c if c else "")

    def _pos_t(buf, e, dim):
        if dim != 3:
            raise ValueError("only video positions (dimension 3) have a frame, got %r" % (dim,))
        return _pos(buf, e, dim, 0)
%>
## Index of reference (frame, row, col) in a grid of gy rows and gx columns; without a
## frame, of (row, col) in a launch of one reference frame.
<%def name="ref(row, col, gx, frame=None, gy=None)" buffered="True">${_ref(row, col, gx, frame, gy)}</%def>
## The entry of rank 0 of reference `ref` (n candidates per reference).
<%def name="first(ref, n)" buffered="True">${_factor(ref)} * ${n}</%def>
## The entry of rank k of reference `ref`.
<%def name="entry(ref, n, k)" buffered="True">${_factor(ref)} * ${n} + ${k}</%def>
## The entry of rank k of the reference whose rank-0 entry is `first` (as first() gives).
<%def name="entry_from(first, k)" buffered="True">${first} + ${k}</%def>
## The distance of entry e in the distance buffer `buf` (an lvalue).
<%def name="dist(buf, e)" buffered="True">${buf}[${e}]</%def>
## Frame, row and column of the position of entry e in the position buffer `buf` of
## dimension dim (2: (y, x), 3: (t, y, x)); lvalues. pos_t needs dim 3.
<%def name="pos_t(buf, e, dim)" buffered="True">${_pos_t(buf, e, dim)}</%def>
<%def name="pos_y(buf, e, dim)" buffered="True">${_pos(buf, e, dim, dim - 2)}</%def>
<%def name="pos_x(buf, e, dim)" buffered="True">${_pos(buf, e, dim, dim - 1)}</%def>
