// Every layer allocator, one line each, in the order interfaces list them. Each `id` names a
// `const AllocatorInfo id_allocator_info` defined in the allocator's own file.
// No include guard: methods/registry.cc includes this list twice with different macros.
SQUEEZEKV_ALLOCATOR(none)
SQUEEZEKV_ALLOCATOR(uniform)
SQUEEZEKV_ALLOCATOR(pyramid)
SQUEEZEKV_ALLOCATOR(squeeze)
SQUEEZEKV_ALLOCATOR(global)
