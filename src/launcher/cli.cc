#include "launcher/cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "launcher/cli_mpi_options.h"
#include "launcher/config_file.h"
#include "launcher/launcher_messages.h"
#include "launcher/run_options.h"
#include "launcher/worker_env.h"
#include "ronde/errors.h"
#include "ronde/settings.h"

namespace ronde::launcher {
namespace {

std::string upperCase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

std::string formatNumber(double value) {
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<int64_t>(value));
  }
  std::ostringstream out;
  out << value;
  return out.str();
}

// The most MiB --fusion-threshold-mb takes: the bytes it becomes must fit the int64 of
// RONDE_FUSION_THRESHOLD (2^63 - 1 bytes is just under 2^43 MiB).
constexpr double kLargestFusionMiB = 8796093022207.0;  // 2^43 - 1

// Range checks whose message says the bounds, not "[0 - 1.79769e+308]". Every number flag
// becomes an integer somewhere (bytes, a timeout in the clock's nanoseconds), so each has a
// largest value too, checked here before anything converts it: by default the one every
// real-valued setting has (kLargestRealSetting), so the launcher refuses what the workers
// would.
std::string checkRange(const std::string& text, double value, double largest) {
  if (!(value <= largest)) return "must be at most " + formatNumber(largest) + ", not " + text;
  return "";
}

CLI::Validator atLeast(double bound, double largest = kLargestRealSetting) {
  return CLI::Validator(
      [bound, largest](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a number";
        if (!(value >= bound)) return "must be at least " + formatNumber(bound) + ", not " + text;
        return checkRange(text, value, largest);
      },
      "NUMBER in [" + formatNumber(bound) + ", " + formatNumber(largest) + "]");
}

CLI::Validator above(double bound, double largest = kLargestRealSetting) {
  return CLI::Validator(
      [bound, largest](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a number";
        if (!(value > bound)) return "must be more than " + formatNumber(bound) + ", not " + text;
        return checkRange(text, value, largest);
      },
      "NUMBER in (" + formatNumber(bound) + ", " + formatNumber(largest) + "]");
}

std::string byDefault(const std::string& text) { return " (default " + text + ")"; }
std::string byDefault(double value) { return byDefault(formatNumber(value)); }
// The default of a worker setting, from the typed table (settings.cc).
std::string tableDefault(const char* setting) { return byDefault(Settings::defaultText(setting)); }

// Tuning flags become RONDE_* variables for the workers' Settings. The variable names and the
// defaults the help states both come from the typed table, never a second copy: a name the
// table lacks fails here, when the command line is built.
void addTuningOptions(CLI::App* run, RunOptions* options) {
  EnvList* env = &options->settings;
  const Settings defaults;
  auto variable = [](const char* setting) { return Settings::variableName(setting); };
  run->add_option_function<double>(
         "--fusion-threshold-mb",
         [env, name = variable("FUSION_THRESHOLD")](double mb) {
           // In range (the check below ran first): mb * 2^20 <= 2^63 - 2^20, exact in a double.
           setVariable(env, name, std::to_string(std::llround(mb * 1024 * 1024)));
         },
         "Tensor fusion buffer size in MiB; 0 disables fusion" +
             byDefault(static_cast<double>(defaults.fusion_threshold_bytes) / (1024 * 1024)))
      ->check(atLeast(0, kLargestFusionMiB))
      ->group("Tuning");
  run->add_option_function<double>(
         "--cycle-time-ms",
         [env, name = variable("CYCLE_TIME")](double ms) {
           setVariable(env, name, formatNumber(ms));
         },
         "Time between fusion cycles in milliseconds" + tableDefault("CYCLE_TIME"))
      ->check(atLeast(0))
      ->group("Tuning");
  run->add_option_function<int>(
         "--cache-capacity",
         [env, name = variable("CACHE_CAPACITY")](int n) {
           setVariable(env, name, std::to_string(n));
         },
         "Entries in the response cache; 0 disables it" + tableDefault("CACHE_CAPACITY"))
      ->check(atLeast(0))
      ->group("Tuning");
  // Both paths, as horovodrun's flag sets HOROVOD_HIERARCHICAL_ALLREDUCE for both.
  auto hierarchical = [env, host = variable("HIERARCHICAL_ALLREDUCE"),
                       gpu = variable("GPU_HIERARCHICAL_ALLREDUCE")](const char* value) {
    setVariable(env, host, value);
    setVariable(env, gpu, value);
  };
  run->add_flag_callback(
         "--hierarchical-allreduce", [hierarchical] { hierarchical("1"); },
         "Allreduce across hosts in two levels, inside each host, then across hosts (host "
         "tensors, and CUDA tensors on NCCL)")
      ->group("Tuning");
  run->add_flag_callback(
         "--no-hierarchical-allreduce", [hierarchical] { hierarchical("0"); },
         "Allreduce with one flat algorithm across all ranks")
      ->group("Tuning");
  run->add_flag_callback(
         "--hierarchical-allgather",
         [env, name = variable("HIERARCHICAL_ALLGATHER")] { setVariable(env, name, "1"); },
         "Allgather across hosts in two levels: across hosts, then inside each host (host "
         "tensors)")
      ->group("Tuning");
  run->add_flag_callback(
         "--no-hierarchical-allgather",
         [env, name = variable("HIERARCHICAL_ALLGATHER")] { setVariable(env, name, "0"); },
         "Allgather with one flat ring across all ranks")
      ->group("Tuning");
}

// horovodrun's autotuning flags, each the worker setting of the same name.
void addAutotuneOptions(CLI::App* run, RunOptions* options) {
  EnvList* env = &options->settings;
  auto variable = [](const char* setting) { return Settings::variableName(setting); };
  run->add_flag_callback(
         "--autotune", [env, name = variable("AUTOTUNE")] { setVariable(env, name, "1"); },
         "Tune fusion and cycle time while training runs")
      ->group("Tuning");
  run->add_flag_callback(
         "--no-autotune", [env, name = variable("AUTOTUNE")] { setVariable(env, name, "0"); },
         "Do not tune (the default)")
      ->group("Tuning");
  // horovodrun's autotuning knobs, each the worker setting of the same name.
  auto autotune_count = [&](const char* flag, const char* setting, int least, const char* what) {
    run->add_option_function<int>(
           flag,
           [env, name = variable(setting)](int n) { setVariable(env, name, std::to_string(n)); },
           std::string(what) + tableDefault(setting))
        ->check(CLI::Range(least, 1000000))
        ->group("Tuning");
  };
  autotune_count("--autotune-warmup-samples", "AUTOTUNE_WARMUP_SAMPLES", 0,
                 "Autotuning: samples discarded first (warm-up)");
  autotune_count("--autotune-steps-per-sample", "AUTOTUNE_STEPS_PER_SAMPLE", 1,
                 "Autotuning: cycles measured per sample");
  autotune_count("--autotune-bayes-opt-max-samples", "AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 1,
                 "Autotuning: most samples of the Bayesian optimisation");
  run->add_option_function<double>(
         "--autotune-gaussian-process-noise",
         [env, name = variable("AUTOTUNE_GAUSSIAN_PROCESS_NOISE")](double noise) {
           setVariable(env, name, formatNumber(noise));
         },
         "Autotuning: noise of the Gaussian process (a regularisation)" +
             tableDefault("AUTOTUNE_GAUSSIAN_PROCESS_NOISE"))
      ->check(above(0))
      ->group("Tuning");
  run->add_option_function<std::string>(
         "--autotune-log-file",
         [env, name = variable("AUTOTUNE_LOG")](const std::string& path) {
           setVariable(env, name, path);
         },
         "CSV log of the autotuning trials")
      ->group("Tuning");
}

// The timeline, the stall inspector, liveness and the start timeout: RONDE_* variables too.
void addTimelineAndStallOptions(CLI::App* run, RunOptions* options) {
  EnvList* env = &options->settings;
  auto variable = [](const char* setting) { return Settings::variableName(setting); };
  run->add_option_function<std::string>(
         "--timeline-filename",
         [env, name = variable("TIMELINE")](const std::string& path) {
           setVariable(env, name, path);
         },
         "Write a timeline of collective operations (Chrome trace JSON) to this file")
      ->group("Timeline");
  run->add_flag_callback(
         "--timeline-mark-cycles",
         [env, name = variable("TIMELINE_MARK_CYCLES")] { setVariable(env, name, "1"); },
         "Mark fusion cycles on the timeline")
      ->group("Timeline");
  run->add_flag_callback(
         "--no-timeline-mark-cycles",
         [env, name = variable("TIMELINE_MARK_CYCLES")] { setVariable(env, name, "0"); },
         "Do not mark fusion cycles (the default)")
      ->group("Timeline");
  run->add_flag_callback(
         "--no-stall-check",
         [env, name = variable("STALL_CHECK_DISABLE")] { setVariable(env, name, "1"); },
         "Do not warn about ranks that stall")
      ->group("Stall check");
  run->add_flag_callback(
         "--stall-check",
         [env, name = variable("STALL_CHECK_DISABLE")] { setVariable(env, name, "0"); },
         "Warn about ranks that stall (the default)")
      ->group("Stall check");
  run->add_option_function<double>(
         "--stall-check-warning-time-seconds",
         [env, name = variable("STALL_CHECK_TIME_SECONDS")](double s) {
           setVariable(env, name, formatNumber(s));
         },
         "Warn when ranks wait this long for others" + tableDefault("STALL_CHECK_TIME_SECONDS"))
      ->check(atLeast(0))
      ->group("Stall check");
  run->add_option_function<double>(
         "--stall-check-shutdown-time-seconds",
         [env, name = variable("STALL_SHUTDOWN_TIME_SECONDS")](double s) {
           setVariable(env, name, formatNumber(s));
         },
         "Shut down when ranks wait this long for others; 0 never" +
             tableDefault("STALL_SHUTDOWN_TIME_SECONDS"))
      ->check(atLeast(0))
      ->group("Stall check");
  run->add_option_function<double>(
         "--liveness-timeout-seconds",
         [env, name = variable("LIVENESS_TIMEOUT_SECONDS")](double s) {
           setVariable(env, name, formatNumber(s));
         },
         "Fail the job when a rank's heartbeat stops this long (stopped or wedged); 0 never" +
             tableDefault("LIVENESS_TIMEOUT_SECONDS"))
      ->check(atLeast(0))
      ->group("Stall check");
  run->add_option_function<double>(
         "--start-timeout",
         [options, env, name = variable("START_TIMEOUT")](double s) {
           options->start_timeout_seconds = s;
           setVariable(env, name, formatNumber(s));
         },
         "Seconds for the launcher's host checks and for all ranks to meet" +
             byDefault(formatNumber(RunOptions{}.start_timeout_seconds) + " / " +
                       Settings::defaultText("START_TIMEOUT")))
      ->check(above(0));
}

// The workers' logging: RONDE_LOG_LEVEL and RONDE_LOG_HIDE_TIME.
void addLoggingOptions(CLI::App* run, EnvList* env) {
  auto variable = [](const char* setting) { return Settings::variableName(setting); };
  run->add_option_function<std::string>(
         "--log-level",
         [env, name = variable("LOG_LEVEL")](const std::string& level) {
           setVariable(env, name, upperCase(level));
         },
         "Workers' log level: TRACE, DEBUG, INFO, WARNING, ERROR or FATAL" +
             byDefault(upperCase(Settings::defaultText("LOG_LEVEL"))))
      ->check(
          CLI::IsMember({"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"}, CLI::ignore_case))
      ->group("Logging");
  // horovodrun's pair, and the spellings it deprecated in 0.21 (accepted with a warning).
  // They exclude each other, as in horovodrun (CLI11 would run both, in the order defined).
  std::vector<CLI::Option*> exclusive;
  auto log_time = [run, env, &exclusive, name = variable("LOG_HIDE_TIME")](
                      const char* flag, const char* hide, std::string help,
                      const char* deprecated_for) {
    CLI::Option* option = run->add_flag_callback(
           flag,
           [env, name, hide, flag, deprecated_for] {
             if (deprecated_for != nullptr) {
               report("warning: ", flag, " is deprecated, as in horovodrun: use ", deprecated_for);
             }
             setVariable(env, name, hide);
           },
           help);
    option->group(deprecated_for != nullptr ? "" : "Logging");
    for (CLI::Option* other : exclusive) option->excludes(other);
    exclusive.push_back(option);
  };
  log_time("--log-with-timestamp", "0",
           "Workers' log lines start with the time (the default: RONDE_LOG_HIDE_TIME=0)", nullptr);
  log_time("--log-without-timestamp", "1",
           "Workers' log lines without the time (RONDE_LOG_HIDE_TIME=1)", nullptr);
  log_time("--log-hide-timestamp", "1", "", "--log-without-timestamp");
  log_time("--no-log-hide-timestamp", "0", "", "--log-with-timestamp");
}

// The launcher's own defaults are RunOptions' initialisers; the help reads them from there.
void addLaunchOptions(CLI::App* run, RunOptions* options) {
  const RunOptions defaults;
  run->add_option_function<int>(
      "--num-proc,--np",
      [options](int n) {
        options->num_ranks = n;
        options->num_ranks_given = true;
      },
      "Number of ranks to start (also -np)");
  run->add_option_function<std::string>(
         "-H,--hosts",
         [options](const std::string& hosts) {
           options->hosts = hosts;
           options->hosts_given = true;
         },
         "Hosts and their slots: host1:2,host2:4 (default localhost:NP)")
      ->group("Hosts");
  run->add_option_function<std::string>(
         "--hostfile",
         [options](const std::string& path) {
           options->hostfile = path;
           options->hostfile_given = true;
         },
         "File with one host per line: 'host slots=N' (also -hostfile)")
      ->group("Hosts");
  run->add_option("-p,--ssh-port", options->ssh_port, "ssh port on all hosts")
      ->check(CLI::Range(1, 65535))
      ->group("ssh");
  run->add_option("-i,--ssh-identity-file", options->ssh_identity_file, "Private key file ssh uses")
      ->group("ssh");
  run->add_option("--ssh-option", options->ssh_options,
                  "Extra ssh option, as for 'ssh -o' (repeatable)")
      ->allow_extra_args(false)
      ->group("ssh");
  run->add_option("--network-interface,--network-interfaces", options->network_interface,
                  "Interface (eth0) or address the store and the workers' data sockets use")
      ->group("Network");
  run->add_option("-x,--env", options->env_requests,
                  "Pass an environment variable to every worker: -x NAME (its value here) "
                  "or -x NAME=value (repeatable)")
      ->allow_extra_args(false);
  run->add_option("--output-filename", options->output_directory,
                  "Write each rank's output to DIR/rank.N/stdout and stderr instead");
  run->add_flag("--prefix-output-with-timestamp", options->prefix_timestamp,
                "Prefix each line of output with the time");
  run->add_option("--grace-period", options->grace_seconds,
                  "Seconds between SIGTERM and SIGKILL when stopping workers" +
                      byDefault(defaults.grace_seconds))
      ->check(atLeast(0));
  run->add_flag("--verbose", options->verbose, "Tell where each rank runs and how it exits");
  run->add_option("--config-file", options->config_file,
                  "horovodrun's YAML file of settings (params, autotune, timeline, stall_check, "
                  "library_options, logging); flags on the command line win over it");
  run->add_option("--bind-to", options->bind_to,
                  "Bind each rank to its own core, to its socket's CPUs, or not at all: "
                  "core, socket or none (default: core when a host's ranks fit its cores, "
                  "else none)")
      ->check(CLI::IsMember({"auto", "core", "socket", "none", "hwthread", "package"}))
      ->group("Binding");
  run->add_flag("--report-bindings", options->report_bindings,
                "Print the CPUs each rank is bound to")
      ->group("Binding");
}

void addElasticOptions(CLI::App* run, ElasticOptions* elastic) {
  const ElasticOptions defaults;
  run->add_option("--host-discovery-script", elastic->discovery_script,
                  "Elastic job: executable printing the usable hosts, one 'host' or "
                  "'host:slots' per line; run every second")
      ->group("Elastic");
  run->add_option("--min-np,--min-num-proc", elastic->min_np,
                  "Elastic: fewest workers to train with (default -np)")
      ->check(CLI::PositiveNumber)
      ->group("Elastic");
  run->add_option("--max-np,--max-num-proc", elastic->max_np, "Elastic: most workers (default: no limit)")
      ->check(CLI::PositiveNumber)
      ->group("Elastic");
  run->add_option("--slots-per-host", elastic->slots_per_host,
                  "Elastic: workers per discovered host without ':slots'" +
                      byDefault(defaults.slots_per_host))
      ->check(CLI::PositiveNumber)
      ->group("Elastic");
  run->add_option("--reset-limit", elastic->reset_limit,
                  "Elastic: stop the job when the world re-forms more often (default: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->group("Elastic");
  run->add_option_function<std::vector<double>>(
         "--blacklist-cooldown-range",
         [elastic](const std::vector<double>& range) {
           elastic->cooldown_given = true;
           elastic->cooldown_low_seconds = range[0];
           elastic->cooldown_high_seconds = range[1];
         },
         "Elastic: LO HI seconds; a failed host may return after a random pause in this range "
         "(default: never)")
      ->expected(2)
      ->check(atLeast(0))
      ->group("Elastic");
  run->add_option("--elastic-timeout", elastic->elastic_timeout_seconds,
                  "Elastic: seconds to wait for --min-np slots before stopping" +
                      byDefault(defaults.elastic_timeout_seconds))
      ->check(above(0))
      ->group("Elastic");
  run->add_option("--host-discovery-timeout", elastic->discovery_timeout_seconds,
                  "Elastic: longest run of the discovery script" +
                      byDefault(defaults.discovery_timeout_seconds))
      ->check(above(0))
      ->group("Elastic");
}

// horovodrun's flags of its controllers and host checks: ronde's equivalent where it has one,
// a refusal with the reason where it has none.
void addHorovodControllerOptions(CLI::App* run, RunOptions* options) {
  // horovodrun caches its host checks for 60 minutes unless --disable-cache; ronde keeps no
  // cache, so its checks run every time, which is what the flag asks for.
  run->add_flag("--disable-cache")
      ->description("Run the host checks every time (ronde always does)")
      ->group("");
  run->add_flag_callback(
      "--tcp",
      [options, name = Settings::variableName("TRANSPORT")] {
        setVariable(&options->settings, name, "tcp");
      },
      "Move data over TCP only, also between ranks of one host");
  // horovodrun's controller choice: Gloo's role is ronde's own backend.
  run->add_flag_callback(
      "--gloo",
      [options, name = Settings::variableName("CPU_OPERATIONS")] {
        setVariable(&options->settings, name, "native");
      },
      "Run the host collectives on ronde's own backend (horovodrun's Gloo controller)");
  run->add_option_function<double>(
         "--gloo-timeout-seconds",
         [options, name = Settings::variableName("TIMEOUT_SECONDS")](double s) {
           setVariable(&options->settings, name, formatNumber(s));
         },
         "Longest wait inside a collective before it fails (horovodrun's Gloo timeout)" +
             tableDefault("TIMEOUT_SECONDS"))
      ->check(above(0));
  // horovodrun flags ronde does not honour: refused with the reason, never ignored.
  auto refused = [run](const char* flag, bool takes_value, std::string why) {
    auto fail = [flag, why] {
      throw CLI::ValidationError(flag, std::string("not supported by ronde: ") + why);
    };
    CLI::Option* option =
        takes_value ? run->add_option_function<std::string>(flag, [fail](const std::string&) { fail(); })
                    : run->add_flag_callback(flag, fail);
    option->group("");  // not in --help: they are not ronde's
  };
  refused("--jsrun", false, "LSF's jsrun launcher is not supported; start the job with "
                            "`ronde run` (ssh), mpirun or srun");
  refused("--torus-allreduce", false, "its two-level allreduce is --hierarchical-allreduce");
  refused("--no-torus-allreduce", false, "there is no torus allreduce to turn off");
  refused("--thread-affinity", true, "the background thread is not pinned to a core");
  refused("--num-nccl-streams", true, "the NCCL backend runs one stream per communicator");
  refused("--mpi-threads-disable", false,
          "the MPI backend needs MPI_THREAD_MULTIPLE (its collectives run on ronde's threads)");
  refused("--no-mpi-threads-disable", false, "the MPI backend always initialises MPI itself");
}

// Every option of `ronde run`, in the order CLI11 runs their callbacks.
void addRunOptions(CLI::App* run, RunOptions* options) {
  addLaunchOptions(run, options);
  addElasticOptions(run, &options->elastic);
  addHorovodControllerOptions(run, options);
  addMpiOptions(run, options);
  addTuningOptions(run, options);
  addAutotuneOptions(run, options);
  addTimelineAndStallOptions(run, options);
  addLoggingOptions(run, &options->settings);
}

int takesValue(const std::string& name, void* context) {
  auto* run = static_cast<CLI::App*>(context);
  const CLI::Option* option = run->get_option_no_throw(name);
  if (option == nullptr) return -1;
  return option->get_items_expected_min();  // 2 for --blacklist-cooldown-range LO HI
}

std::vector<const char*> pointers(const std::vector<std::string>& args) {
  std::vector<const char*> result;
  for (const std::string& arg : args) result.push_back(arg.c_str());
  return result;
}

// --config-file: each key of the file is the flag that sets the same thing, parsed as if given
// on the command line, unless the command line gave that flag (or its opposite): the command
// line wins, as with horovodrun. An error names the file, the line and the key.
void applyConfigFile(const CLI::App& run, RunOptions* options) {
  const std::string path = options->config_file;
  for (const ConfigEntry& entry : readConfigFile(path)) {
    const bool overridden = std::any_of(
        entry.overridden_by.begin(), entry.overridden_by.end(), [&](const std::string& flag) {
          const CLI::Option* option = run.get_option_no_throw(flag);
          return option != nullptr && option->count() > 0;
        });
    if (overridden) continue;
    CLI::App one{"ronde run", "run"};
    addRunOptions(&one, options);
    std::vector<std::string> reversed(entry.args.rbegin(), entry.args.rend());  // CLI11's order
    try {
      one.parse(reversed);
    } catch (const CLI::ParseError& error) {
      throw makeError(ErrorCode::kInvalidArgument, path, ":", entry.line, ": ", entry.key, ": ",
                      error.what());
    }
  }
}

}  // namespace

std::string runOptionDescription(const std::string& flag) {
  CLI::App run{"ronde run", "run"};
  RunOptions options;
  addRunOptions(&run, &options);
  const CLI::Option* option = run.get_option_no_throw(flag);
  return option != nullptr ? option->get_description() : "";
}

std::vector<std::pair<std::string, std::string>> workerSettingsFromFlags(
    const std::vector<std::string>& flags) {
  CLI::App run{"ronde run", "run"};
  RunOptions options;
  addRunOptions(&run, &options);
  std::vector<std::string> reversed(flags.rbegin(), flags.rend());  // CLI11 wants them so
  try {
    run.parse(reversed);
  } catch (const CLI::ParseError& error) {
    throw makeError(ErrorCode::kInvalidArgument, "ronde run: ", error.what());
  }
  if (!options.config_file.empty()) applyConfigFile(run, &options);
  return options.settings;
}

int runCommandLine(const std::vector<std::string>& args) {
  CLI::App app{"ronde: distributed deep-learning training runtime", "ronde"};
  app.set_version_flag("-v,--version", std::string("ronde ") + RONDE_LAUNCHER_VERSION);
  app.require_subcommand(1);

  RunOptions options;
  CLI::App* run = app.add_subcommand(
      "run", "Start a job: ronde run -np N [-H host:slots,...] [options] COMMAND [ARGS...]");
  addRunOptions(run, &options);
  // horovodrun's -v/--version and -cb/--check-build: the version, or what this build has,
  // instead of a job (no -np or command needed).
  run->set_version_flag("-v,--version", std::string("ronde ") + RONDE_LAUNCHER_VERSION);
  bool run_check_build = false;
  run->add_flag("--check-build", run_check_build,
                "Print what this build has (as `ronde check-build`) and exit (also -cb)");
  run->footer(
      "The command is the first word that is not an option; put -- before it if it starts "
      "with a dash.");

  bool print_settings = false;
  CLI::App* check = app.add_subcommand("check-build", "List what this build of ronde has");
  check->add_flag("--settings", print_settings,
                  "Also list every setting (environment variable) with its default");
  std::string python;
  check->add_option("--python", python,
                    "Interpreter whose frameworks to report (default: python3 on PATH)");

  std::vector<std::string> parse_args = {"ronde"};
  bool is_run = !args.empty() && args[0] == "run";
  SplitArguments split;
  if (is_run) {
    split = splitRunArguments({args.begin() + 1, args.end()}, takesValue, run);
    parse_args.push_back("run");
    parse_args.insert(parse_args.end(), split.options.begin(), split.options.end());
  } else {
    parse_args.insert(parse_args.end(), args.begin(), args.end());
  }
  std::vector<const char*> argv = pointers(parse_args);
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }
  if (run->parsed() && run_check_build) return checkBuild(false, python);
  if (run->parsed() && !options.config_file.empty()) {
    try {
      applyConfigFile(*run, &options);
    } catch (const Error& error) {
      report(error.what());
      return 2;
    }
  }
  if (run->parsed()) {
    options.command = split.command;
    return runJob(options);
  }
  return checkBuild(print_settings, python);
}

}  // namespace ronde::launcher
