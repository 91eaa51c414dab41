#!/bin/bash
# One part of results/smollm2_v2 (PLAN_CHANGES.md change 62): two streams, whole seeds beside the
# base's resumable evaluations, stopped at DEADLINE (epoch seconds) with SIGINT.
cd /work/v2run
C=configs/smollm2_v2.yaml; R=results/smollm2_v2; L=/work/part/logs; mkdir -p $L /work/part/claims
DEADLINE=$1; SEED_EST=${2:-3600}
now() { date +%s; }
run_until_deadline() {  # run a resumable command; SIGINT at the deadline
  local name=$1; shift
  echo "$(date -u +%T) start $name" >> $L/streams.log
  "$@" > $L/$name.out 2>&1 &
  local pid=$!
  while kill -0 $pid 2>/dev/null; do
    if [ $(now) -ge $DEADLINE ]; then kill -INT $pid; echo "$(date -u +%T) SIGINT $name" >> $L/streams.log; fi
    sleep 10
  done
  wait $pid; local rc=$?
  echo "$(date -u +%T) end $name rc=$rc" >> $L/streams.log
  return $rc
}
seeds_loop() {
  for s in $(seq 200 215); do
    mkdir /work/part/claims/seed$s 2>/dev/null || continue
    est=$(cat /work/part/seed_est 2>/dev/null || echo $SEED_EST)
    if [ $(( $(now) + est )) -gt $DEADLINE ]; then rmdir /work/part/claims/seed$s; echo "$(date -u +%T) no time for seed $s (est $est s)" >> $L/streams.log; return; fi
    t0=$(now)
    echo "$(date -u +%T) start seed $s" >> $L/streams.log
    python grpo.py train --config $C --run $R --condition many --seed $s > $L/train_$s.out 2>&1 || { echo "train $s failed" >> $L/streams.log; return; }
    python grpo.py eval --config $C --run $R --adapter $R/train_many_s$s/step_030 > $L/eval_$s.out 2>&1 || { echo "eval $s failed" >> $L/streams.log; return; }
    python grpo.py eval --config $C --run $R --eval-set matched --adapter $R/train_many_s$s/step_030 > $L/matched_$s.out 2>&1 || { echo "matched $s failed" >> $L/streams.log; return; }
    echo $(( $(now) - t0 )) > /work/part/seed_est
    echo "$(date -u +%T) end seed $s in $(( $(now) - t0 )) s" >> $L/streams.log
  done
}
pool_train() {
  mkdir /work/part/claims/pooltrain 2>/dev/null || return
  run_until_deadline pooltrain python grpo.py eval --config $C --run $R --eval-set pool-train
}
streamA() { run_until_deadline base python grpo.py eval --config $C --run $R && { seeds_loop; pool_train; }; }
streamB() { seeds_loop; pool_train; }
streamA & A=$!
streamB & B=$!
wait $A $B
echo "$(date -u +%T) part over" >> $L/streams.log
