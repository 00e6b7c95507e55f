"""`gemmdsl tune TEMPLATE`: search a space of specs, prune it with the analysis passes, time the rest.

    candidates = expand(template_text, path)       # every combination of the choice groups
    report = screen(candidates, sizes)             # front end + analysis passes, no GPU
    ranked = rank(report.survivors, sizes)         # best predicted first
    kept, dropped = select(ranked, budget)         # the top N, after ptxas's spill check
    timing = time_candidates(kept, sizes, pool, db)  # workers, one per GPU (tune_workers), into the database
    write_winner(path, winner, timing, ...)        # a plain .gemm with the figures in its header

Templates
---------
A template (`.tgemm`) is a spec in which any value, or part of one, may be a choice
group `{a,b,c}`: `tile: {128x128,256x128}x{8,16}`, `lanes: {4x8 row,8x4 col}`,
`raster: {row,group(8)}`. The candidates are every combination of the groups, in
source order with the last group varying fastest, numbered t0, t1, ...; each
candidate is the template's text with every group replaced by one alternative and
the kernel name NAME replaced by NAME_tI.

A `{` opens a choice group when, reading on from it, a top-level `,` or the
closing `}` comes before any `{`, `;`, `:`, comment or line end, with text before
it (a comma inside parentheses, as in `xor(2, 2, 3)`, is not top-level). Section
braces never qualify: in a valid spec a `{` is followed by nothing, by an entry's
`key:` or by a section header, so a plain spec expands to itself. Comments are
never expanded. A group must close on its own line; it holds no `{ } ; :`, no
comment and no other group; its alternatives are trimmed, substituted verbatim,
non-empty and distinct.

Screening and the cost model
----------------------------
Every candidate goes through the real front end; those it rejects are counted by
their first error. The valid ones are analysed at the first problem size and pruned,
each for the first rule it breaks, in this order:

  tile        the block tile does not divide every requested size (`bounds: exact` kernels;
              checked kernels are analysed at the first size rounded up to whole tiles)
  conflicts   only with --conflict-tolerance PCT: the bank-conflict pass predicts wavefronts beyond
              the ideal (loads or stores) of at least PCT% of all wavefronts. By default conflicts
              are not pruned but priced: the cost model counts every wavefront (measured on an
              H100, pad-0 twins with 3-8% excess store wavefronts were among the fastest)
  registers   the register estimate exceeds the per-thread cap even at the low edge of its measured
              error band: max(accumulators + fragments, demand x (1 - ESTIMATE_BAND)) > cap
              (gemmdsl/passes/registers.py; the band is what scripts/register_study.py measured
              against ptxas): the cap is the architecture's 255,
              `budget { registers }`, or what `__launch_bounds__(threads[, blocks_per_sm])` leaves
              (65536 / (blocks_per_sm * threads), rounded down to 8) -- a predicted spill
  occupancy   fewer than --min-warps resident warps per SM (default 8)

The survivors are ranked by the cost model's predicted efficiency (gemmdsl/cost_model.py:
the bottleneck of instruction issue, the L1 pipe that serves shared memory and global loads, and
L2 bandwidth, per FFMA; fragment-load latency where the register cap leaves no room for double
buffering; occupancy averaged over the register estimate's band; wave quantization over --sms SMs).
Tensor-core candidates are scored by the cycle model the families pick their members by, as a share
of the instruction's peak (each path's prediction carries its model: paths/*/facts.py).
Equal scores go to the candidate with fewer FFMAs that switch both operands (FMA order), then to
more registers left under the cap, then to fewer L1 wavefronts per FFMA, then to the earlier one.
The model sees neither raster nor pipeline depth: variants that differ only there tie on all of
these, and timing decides between them. The top --budget candidates are kept; with nvcc
on PATH (else NVRTC) each is built first and one that ptxas makes spill (an mma.sync kernel: more than
MMA_SYNC_TOLERATED_SPILL_BYTES), or whose real register count drops it under --min-warps, is replaced
by the next in rank.

Timing uses bench.bench (cuBLAS beside, same buffers) in one worker process per GPU, or in Ray
tasks (gemmdsl/tune_workers.py), writes every measurement to the tuning database as it arrives and
reuses what it holds (gemmdsl/tune_db.py), and picks the highest geometric mean over the sizes of the
percentage of the cuBLAS launches timed beside each candidate (docs/tuning-at-scale.md). --exhaustive
times every valid candidate in the same run and reports whether the pruned search found the same winner.

The package, one concern a module (each module's docstring says more):

    templates.py  the template language: choice groups, `expand` into candidates
    screen.py     the front end and the pruning rules on each candidate's prediction (its path's facts)
    timing.py     timing on the GPUs (workers or Ray) into the tuning database; the measurements
    rank.py       the score, the rank order, ptxas's figures and the selection within the budget
    report.py     the winner's spec, the screening report, the results JSON
    command.py    the options and the search end to end (tune_cli.py and tune_family.py call it)

Every name those modules define is importable from `gemmdsl.tune`, as before the package was split.
"""
from .templates import (Candidate, ChoiceGroup, DEFAULT_MAX_CANDIDATES, GROUP_HINT, Template, choice_entries,
                        count_candidates, expand, find_choice_groups, kernel_name_span, line_column, mask_comments,
                        template_error, template_stem)
from .screen import (DEFAULT_MIN_WARPS, REASONS, REASON_WORDS, ScreenReport, Size, Survivor, analysis_size,
                     candidate_path, checked_bounds, message_shape, predict, prune_reason, reference_sms, screen,
                     tiles_all)
from .timing import (Measurement, Timing, geomean, prebuild, run_tasks, time_candidates, timing_from_report,
                     timing_from_rows, timing_tasks)
from .rank import BuildFn, predicted_efficiency, ptxas_of, rank, rank_key, ranks_on_ptxas, select, with_ptxas
from .report import (exhaustive_comparison, kept_lines, nothing_survived, results_json, screen_lines, search_summary,
                     winner_header, winner_text, write_results_json, write_winner)
from .command import (DEFAULT_BUDGET, DEFAULT_SIZES, add_tune_arguments, gpus_argument, print_report, read_template,
                      refuse_late_failures, report_and_write, search, time_with_options, timing_pool, tune_sizes_main,
                      unwritable)
from ..tune_workers import build_failure  # noqa: F401  (tune's name for it, where the workers' backend uses it)
