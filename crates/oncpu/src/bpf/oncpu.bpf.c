// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// The on-CPU table: on every context switch, record which thread left and
// which thread entered a CPU, so userspace spinners can ask "is the lock
// owner running?" as the kernel's mutex does (seed 002: spin while
// rq->curr == owner; seed 001: "a simple array indexed by tid").
//
// One 64-bit slot per (tid mod ONCPU_SLOTS):
//
//     63 ............ 32 31 ............. 0
//     [ tid            ] [ cpu + 1, or 0   ]
//
// The tid tag lets the reader tell its thread's slot from a colliding
// thread's (that reads "unknown", never a wrong "running"). Each slot is
// written with one 64-bit store, so a reader's plain load sees either the
// old or the new value, never half of each.
//
// The program is CO-RE: struct task_struct below names only the two fields
// it reads, and libbpf relocates their offsets against the running kernel's
// BTF, so no kernel headers are needed to build it.

#include <stdbool.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define ONCPU_SLOTS (1 << 16)

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

// The table userspace maps (BPF_F_MMAPABLE: reading it is a plain load).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, ONCPU_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} oncpu_slots SEC(".maps");

// Slot 0: the process (tgid) whose threads are recorded; 0 records every
// thread of the system. Set by the loader before the program is attached.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} oncpu_filter SEC(".maps");

static __always_inline void record(struct task_struct *task, __u32 only_tgid, __u64 state)
{
	__u32 pid = task->pid;
	// pid 0 is a CPU's idle task: never a lock owner.
	if (pid == 0 || (only_tgid != 0 && (__u32)task->tgid != only_tgid))
		return;
	__u32 slot = pid & (ONCPU_SLOTS - 1);
	__u64 *value = bpf_map_lookup_elem(&oncpu_slots, &slot);
	if (value)
		*value = ((__u64)pid << 32) | state;
}

// tp_btf attaches through BTF (no tracefs needed); its arguments are
// typed kernel pointers the verifier lets us read directly.
SEC("tp_btf/sched_switch")
int BPF_PROG(oncpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 zero = 0;
	__u32 *filter = bpf_map_lookup_elem(&oncpu_filter, &zero);
	__u32 only_tgid = filter ? *filter : 0;
	// Out first, then in: when prev and next share a slot, "next is
	// running" is the value that stays.
	record(prev, only_tgid, 0);
	record(next, only_tgid, (__u64)bpf_get_smp_processor_id() + 1);
	return 0;
}
