// SPDX-License-Identifier: GPL-2.0
/*
 * The BPF scheduler's decisions (src/bpf/policy.h), compiled for the host
 * and checked against the cases below. Run by tests/policy.rs.
 */
#include <stdint.h>
#include <stdio.h>

/* intf.h declares u32/s32/u64 itself outside BPF (no vmlinux.h here). */
#include "../../src/bpf/policy.h"

static int failures;

#define CHECK(cond)                                                     \
	do {                                                            \
		if (!(cond)) {                                          \
			printf("FAILED line %d: %s\n", __LINE__, #cond); \
			failures++;                                     \
		}                                                       \
	} while (0)

int main(void)
{
	struct vcpu_model unknown = { 0 };
	struct vcpu_model weak = { .capacity = 400 };
	struct vcpu_model hidden = { .capacity = 1024, .hidden = VS_HIDDEN_STACKED };

	/* RWC hides only when on. */
	CHECK(vs_visible(&weak, 1));
	CHECK(!vs_visible(&hidden, 1));
	CHECK(vs_visible(&hidden, 0));

	/* Unmeasured vCPUs count as full strength; capacity-blind is flat. */
	CHECK(vs_score(&unknown, 1) == 1024);
	CHECK(vs_score(&weak, 1) == 400);
	CHECK(vs_score(&weak, 0) == 1024);

	/* Stay on prev unless the best is more than a third stronger. */
	CHECK(vs_keep_prev(768, 1024));
	CHECK(!vs_keep_prev(767, 1024));
	CHECK(vs_keep_prev(1024, 1024));
	CHECK(!vs_keep_prev(512, 1024));

	/* Virtual time: nice 0 (weight 100) pays wall time; heavier pays less. */
	CHECK(vs_vtime_charge(3000000, 100) == 3000000);
	CHECK(vs_vtime_charge(3000000, 200) == 1500000);
	CHECK(vs_vtime_charge(1000, 0) == 100000); /* weight 0 treated as 1 */

	/* A sleeper is at most one slice behind the queue's clock. */
	CHECK(vs_queue_vtime(0, 100000000, 3000000) == 97000000);
	CHECK(vs_queue_vtime(99000000, 100000000, 3000000) == 99000000);
	CHECK(vs_queue_vtime(5, 1000, 3000000) == 5); /* clock below a slice */

	/* At a slice end, keep the vCPU unless a waiting task is owed it. */
	CHECK(vs_keeps_vcpu(100, 100));
	CHECK(vs_keeps_vcpu(99, 100));
	CHECK(!vs_keeps_vcpu(101, 100));

	if (failures)
		return 1;
	printf("policy: all checks passed\n");
	return 0;
}
