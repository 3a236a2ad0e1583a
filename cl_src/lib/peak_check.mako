## The input value check of lib/convert.cl.mako, folded into a kernel that reads the
## converted image anyway, for inputs that need no conversion (float32, one channel, C order:
## their layout already is the planar one): the kernel then reads the caller's buffer (or
## the plain copy of a host array) and the conversion launch is saved.
##
## Same contract as to_planar's check: the largest |value| of the first `check_count`
## floats of `src` is folded into check[word] (bits of a non-negative float; NaN and inf
## give >= 0x7f800000), and global work-item 0 clears check[1 - word], the word of the
## caller's next run. check_count == 0 (a launch that checks nothing: every launch but a
## run's first, or an input that went through the conversion) leaves both words alone.
##
## Templates include it as the namespace "pk" (file="/lib/peak_check.mako"), the tag's line
## ending in a backslash, and use `args()` at the end of the kernel's arguments and
## `fold("img")` first in its body, before any work-item returns: the fold has barriers,
## and check_count is the same for the whole launch, so every work-item of a group reaches
## them. Every work-item of the launch takes elements gid, gid + size, ... (gid its
## flattened global id, size the launch's work-items), so reads are coalesced and every
## element is read by exactly one work-item; a work-group reduces in local memory and makes
## one atomic_max on check[word].
<%def name="args()">, __global uint *restrict check, const int word, const int check_count</%def>
<%def name="fold(src)">
    __local uint group_peak;    // (local variables must be declared at kernel scope)
    if (check_count > 0) {
        const int lid_ = (get_local_id(2) * get_local_size(1) + get_local_id(1))
                         * get_local_size(0) + get_local_id(0);
        const int gid_ = (get_global_id(2) * get_global_size(1) + get_global_id(1))
                         * get_global_size(0) + get_global_id(0);
        const int size_ = get_global_size(0) * get_global_size(1) * get_global_size(2);
        if (gid_ == 0)
            check[1 - word] = 0u;
        if (lid_ == 0)
            group_peak = 0u;
        barrier(CLK_LOCAL_MEM_FENCE);
        uint largest_ = 0u;
        for (int i_ = gid_; i_ < check_count; i_ += size_)
            largest_ = max(largest_, as_uint(fabs(${src}[i_])));
        if (largest_ != 0u)
            atomic_max(&group_peak, largest_);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid_ == 0 && group_peak != 0u)
            atomic_max(check + word, group_peak);
    }
</%def>
