// Every token policy, one line each, in the order interfaces list them. Each `id` names a
// `const PolicyInfo id_policy_info` defined in the policy's own file (methods/registry.h).
// No include guard: methods/registry.cc includes this list twice with different macros.
SQUEEZEKV_POLICY(full)
SQUEEZEKV_POLICY(cumulative)
SQUEEZEKV_POLICY(chunked)
SQUEEZEKV_POLICY(tova)
SQUEEZEKV_POLICY(streaming)
SQUEEZEKV_POLICY(window)
SQUEEZEKV_POLICY(snapkv)
SQUEEZEKV_POLICY(knorm)
SQUEEZEKV_POLICY(kvzip)
SQUEEZEKV_POLICY(keydiff)
SQUEEZEKV_POLICY(expected_attention)
