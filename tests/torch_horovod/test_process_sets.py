"""Process sets in Horovod's style: added and removed at run time and at init, collectives
inside a set over its members only (a root is a global rank), sets running side by side, and
ranks outside a set refused."""

import torch

import ronde.torch as hvd
from horovod_case import HorovodTestCase, rank_input


class ProcessSetTests(HorovodTestCase):
    def _parity_sets(self):
        n = hvd.size()
        even = hvd.add_process_set([r for r in range(n) if r % 2 == 0])
        odd = hvd.add_process_set([r for r in range(n) if r % 2 == 1]) if n > 1 else None
        return even, odd

    def test_add_and_remove(self):
        n, me = hvd.size(), hvd.rank()
        self.assertEqual(hvd.global_process_set.process_set_id, 0)
        self.assertEqual(hvd.global_process_set.size(), n)
        self.assertEqual(hvd.global_process_set.rank(), me)
        even = hvd.add_process_set(hvd.ProcessSet(range(0, n, 2)))
        self.assertEqual(even.process_set_id, 1)
        self.assertEqual(even.ranks, list(range(0, n, 2)))
        self.assertEqual(even.size(), len(range(0, n, 2)))
        self.assertEqual(even.included(), me % 2 == 0)
        self.assertEqual(even.rank(), me // 2 if me % 2 == 0 else -1)
        last = hvd.add_process_set([n - 1])  # a list of ranks is accepted as well
        self.assertEqual(last.process_set_id, 2)
        self.assertTrue(hvd.remove_process_set(even))
        self.assertIsNone(even.process_set_id)
        self.assertFalse(hvd.remove_process_set(even))
        self.assertFalse(hvd.remove_process_set(hvd.global_process_set))
        self.assertEqual(hvd.global_process_set.process_set_id, 0)
        # The remaining set still works.
        if last.included():
            self.assertSame(hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=last),
                            torch.ones(2))

    def test_add_with_a_rank_outside_the_world(self):
        with self.assertRaises((ValueError, RuntimeError)):
            hvd.add_process_set([0, hvd.size()])
        self.assertSame(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(hvd.size())))

    def test_collectives_in_two_sets_side_by_side(self):
        n, me = hvd.size(), hvd.rank()
        if n < 2:
            self.skipTest("needs two ranks")
        for process_set in self._parity_sets():
            if not process_set.included():
                continue
            members = process_set.ranks
            k, mine = len(members), process_set.rank()
            inputs = {r: rank_input(r, (len(members) + 1, 2), torch.int32) for r in members}
            self.assertSame(hvd.allreduce(inputs[me], op=hvd.Sum, process_set=process_set),
                            sum(inputs[r] for r in members))
            self.assertSame(hvd.allreduce(inputs[me].float(), op=hvd.Average,
                                          process_set=process_set),
                            sum(inputs[r] for r in members).double().div(k).float())
            outs = hvd.grouped_allreduce([inputs[me], inputs[me][0]], op=hvd.Max,
                                         process_set=process_set)
            want = torch.stack([inputs[r] for r in members]).max(0).values
            self.assertSame(outs[0], want)
            self.assertSame(outs[1], want[0])
            uneven = {r: rank_input(r, (r % 3, 2), torch.float64) for r in members}
            self.assertSame(hvd.allgather(uneven[me], process_set=process_set),
                            torch.cat([uneven[r] for r in members]))
            for root in members:  # a global rank
                self.assertSame(hvd.broadcast(inputs[me], root, process_set=process_set),
                                inputs[root])
            out, received = hvd.alltoall(torch.full((k,), float(me)), splits=[1] * k,
                                         process_set=process_set)
            self.assertSame(out, torch.tensor(members, dtype=torch.float32))
            self.assertEqual(received.tolist(), [1] * k)
            full = sum(inputs[r] for r in members)
            base, extra = divmod(full.shape[0], k)
            start = mine * base + min(mine, extra)
            self.assertSame(hvd.reducescatter(inputs[me], op=hvd.Sum, process_set=process_set),
                            full[start:start + base + (1 if mine < extra else 0)])
            hvd.barrier(process_set=process_set)
            got = hvd.broadcast_object({"root": me} if mine == 0 else None, members[0],
                                       process_set=process_set)
            self.assertEqual(got, {"root": members[0]})
            self.assertEqual(hvd.allgather_object(me, process_set=process_set), members)

    def test_overlapping_sets(self):
        n, me = hvd.size(), hvd.rank()
        if n < 3:
            self.skipTest("needs three ranks")
        low = hvd.add_process_set([0, 1])
        high = hvd.add_process_set(list(range(1, n)))
        # Rank 1 is in both; it takes part in the low set's allreduce, then the high set's.
        if low.included():
            out = hvd.allreduce(torch.tensor([me + 1]), op=hvd.Sum, process_set=low)
            self.assertEqual(out.item(), 3)
        if high.included():
            out = hvd.allreduce(torch.tensor([me + 1]), op=hvd.Sum, process_set=high)
            self.assertEqual(out.item(), sum(r + 1 for r in range(1, n)))
        out = hvd.allreduce(torch.tensor([1]), op=hvd.Sum)
        self.assertEqual(out.item(), n)

    def test_unnamed_requests_in_sets_keep_their_own_count(self):
        # Only the members of a set submit its unnamed requests; the global set's numbering on
        # members and non-members must still agree afterwards.
        n, me = hvd.size(), hvd.rank()
        first = hvd.add_process_set([0])
        for i in range(3 if me == 0 else 0):
            self.assertSame(hvd.allreduce(torch.ones(1) * i, op=hvd.Sum, process_set=first),
                            torch.ones(1) * i)
        self.assertSame(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(n)))

    def test_rank_outside_the_set_is_refused(self):
        n, me = hvd.size(), hvd.rank()
        if n < 2:
            self.skipTest("needs two ranks")
        top = hvd.add_process_set([n - 1])
        if not top.included():
            with self.assertRaises(RuntimeError):
                hvd.allreduce(torch.ones(2), process_set=top, name="outside")
            with self.assertRaises(RuntimeError):
                hvd.allgather(torch.ones(2), process_set=top, name="outside.ag")
        self.assertSame(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(n)))

    def test_broadcast_root_outside_the_set(self):
        n = hvd.size()
        if n < 2:
            self.skipTest("needs two ranks")
        top = hvd.add_process_set(list(range(1, n)))
        if top.included():
            with self.assertRaises(ValueError):
                hvd.broadcast(torch.ones(2), 0, process_set=top)
            out = hvd.broadcast(torch.full((2,), float(hvd.rank())), n - 1, process_set=top)
            self.assertSame(out, torch.full((2,), float(n - 1)))

    def test_sets_given_to_init(self):
        n, me = hvd.size(), hvd.rank()
        if n < 2:
            self.skipTest("needs two ranks")
        # Neither set has every rank: Horovod refuses a set equal to an existing one.
        first = hvd.ProcessSet([0])
        rest = hvd.ProcessSet(range(1, n))
        hvd.shutdown()
        hvd.init(process_sets=[first, rest])
        self.assertEqual(first.process_set_id, 1)
        self.assertEqual(rest.process_set_id, 2)
        if first.included():
            self.assertSame(hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=first),
                            torch.ones(1))
        else:
            self.assertSame(hvd.allreduce(torch.tensor([me]), op=hvd.Sum, process_set=rest),
                            torch.tensor([n * (n - 1) // 2]))

    def test_removed_set_leaves_the_others_working(self):
        n = hvd.size()
        sets = [hvd.add_process_set([r]) for r in range(n)]
        self.assertEqual([s.process_set_id for s in sets], list(range(1, n + 1)))
        for s in sets[::2]:
            self.assertTrue(hvd.remove_process_set(s))
        for r, s in enumerate(sets):
            if r % 2 == 1 and s.included():
                self.assertSame(hvd.allreduce(torch.ones(1) * r, op=hvd.Sum, process_set=s),
                                torch.ones(1) * r)
        # Rank 0's set was removed: a set of the same ranks may be added again.
        again = hvd.add_process_set([0])
        if again.included():
            self.assertSame(hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=again),
                            torch.ones(1))
