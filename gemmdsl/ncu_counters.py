"""The Nsight Compute counters every path's `profile` comparison reads (listed by `ncu --query-metrics`): a
launch's registers, occupancy limits, grid, shared memory and DRAM reads. A path's own counters (the wgmma
path's GMMA and TMA ones) live with its facts (paths/<name>/facts.py)."""

REGISTERS = "launch__registers_per_thread"
OCCUPANCY_LIMITS = {  # our limit names -> ncu's blocks-per-SM limit metrics
    "registers": "launch__occupancy_limit_registers",
    "shared memory": "launch__occupancy_limit_shared_mem",
    "threads": "launch__occupancy_limit_warps",
    "blocks": "launch__occupancy_limit_blocks",
}
# What the launch reads from DRAM: A and B once, where L2 serves every repeat, and a fuse chain's operands.
DRAM_READ = "dram__bytes_read.sum"
GRID_SIZE = "launch__grid_size"
DYNAMIC_SMEM = "launch__shared_mem_per_block_dynamic"
# A comparison's counter that is not one ncu metric: the fewest blocks per SM of ncu's occupancy limits.
MEASURED_BLOCKS_PER_SM = "blocks per SM (least occupancy limit)"
# What every launch is measured on, whichever path's counters come beside.
LAUNCH_METRICS = (REGISTERS, DRAM_READ, *OCCUPANCY_LIMITS.values())
