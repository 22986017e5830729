-- gpu-tracker's advice at submission: a Slurm cli_filter plugin script (cli_filter/lua).
--
-- When a user submits a job that gpu-tracker will track (sbatch, salloc, and srun where it
-- makes an allocation), this prints a short note on their terminal, before the job id, from
-- their own finished jobs of the same name (or batch script): what those used against what
-- they asked for, and the request that would have fitted them (docs/REPORT.md, "Advice at
-- submission"). The note itself is made by gpu-tracker-report --advise-submission.
--
-- Install (docs/INSTALL.md): slurm.conf gets CliFilterPlugins=cli_filter/lua, and this file
-- goes beside slurm.conf as cli_filter.lua on every machine users submit from, with
-- GPU_TRACKER_REPORT below naming the installed gpu-tracker-report. A site that has a
-- cli_filter.lua of its own keeps it, pastes gpu_tracker_advise below into it, and calls
-- pcall(gpu_tracker_advise, options, offset) from its slurm_cli_pre_submit.
--
-- It never refuses, fails or holds a submission: every error is caught, the job is submitted
-- whatever happens, gpu-tracker-report waits at most the site's advise.wait_seconds for
-- Slurm's database, and coreutils' timeout stops the whole call after GPU_TRACKER_SECONDS
-- (then kills it a second later), whatever holds it; without timeout there is no advice. The
-- options are handed over as arguments, each quoted: a job's name is the user's text, and a
-- pipe to a program that is gone would kill sbatch with SIGPIPE.
--
-- The note goes to the submission's stderr only where that is a terminal, or where the user
-- asked for it with GPU_TRACKER_ADVICE=always (or why): a script that reads
-- `sbatch --parsable` with its stderr (2>&1) gets the job id alone.

local GPU_TRACKER_REPORT = "/usr/bin/gpu-tracker-report"
local GPU_TRACKER_TIMEOUT = "/usr/bin/timeout"
-- Longest the advice may hold a submission, seconds (above the site's advise.wait_seconds).
local GPU_TRACKER_SECONDS = 12

-- The submission's options the note uses (Slurm's long option names).
local GPU_TRACKER_FIELDS = {
    "job-name", "mem", "mem-per-cpu", "time", "ntasks", "cpus-per-task", "nodes", "gres",
    "gpus", "gpus-per-node",
}

-- One shell word: control characters made spaces, single quotes closed and reopened.
local function gpu_tracker_word(s)
    s = tostring(s):gsub("%c", " ")
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

function gpu_tracker_advise(options, offset)
    -- The later components of a heterogeneous job: one note is enough.
    if offset ~= nil and offset > 0 then
        return
    end
    local kind = options["type"]
    -- srun inside a job makes a step, not a job.
    if kind == "srun" and os.getenv("SLURM_JOB_ID") ~= nil then
        return
    end
    local args = { gpu_tracker_word("type=" .. tostring(kind)) }
    for _, name in ipairs(GPU_TRACKER_FIELDS) do
        local v = options[name]
        if v ~= nil then
            args[#args + 1] = gpu_tracker_word(name .. "=" .. v)
        end
    end
    local argv = options["argv"]
    if argv ~= nil and argv[1] ~= nil then
        args[#args + 1] = gpu_tracker_word("argv1=" .. argv[1])
    end
    local spank = options["spank"]
    if spank ~= nil and spank["gpu_tracker"] ~= nil then
        local v = spank["gpu_tracker"]["gpu-track"]
        if v ~= nil then
            args[#args + 1] = gpu_tracker_word("gpu_track=" .. v)
        end
    end
    -- Nothing unbounded: no timeout, no advice.
    local t = io.open(GPU_TRACKER_TIMEOUT, "r")
    if t == nil then
        return
    end
    t:close()
    -- --foreground: the program stays in sbatch's process group, so that it may write to the
    -- terminal and Ctrl-C reaches it (the question it leaves running has a group of its own).
    local p = io.popen(gpu_tracker_word(GPU_TRACKER_TIMEOUT) .. " --foreground -k 1 "
        .. tostring(GPU_TRACKER_SECONDS) .. " " .. gpu_tracker_word(GPU_TRACKER_REPORT)
        .. " --advise-submission " .. table.concat(args, " ") .. " </dev/null", "r")
    if p ~= nil then
        p:read("*a")
        p:close()
    end
end

function slurm_cli_setup_defaults(options, early_pass)
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, offset)
    pcall(gpu_tracker_advise, options, offset)
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, jobid, stepid)
    return slurm.SUCCESS
end
