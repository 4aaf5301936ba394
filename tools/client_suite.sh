# Shared by tools/kafka_python_suite.sh and tools/aiokafka_suite.sh (sourced, not run):
# a client library's own suite run stock and with its fastkwire accelerator as a pytest
# plugin, and the two runs' counts compared. Expects $suite (the unpacked suite's folder),
# $work (a scratch folder) and $started (SECONDS at the start) to be set.

# run LABEL [pytest args...]: the summary line's counts go to $work/LABEL.counts and the
# failed test ids to $work/LABEL.failed. From the suite's folder, so its pyproject's pytest
# settings apply and the test package is the one its imports name.
run() {
    local label="$1"; shift
    local t0=$SECONDS
    (cd "$suite" && python -m pytest -q -p no:cacheprovider -rfE "$@") >"$work/$label.log" 2>&1 || true
    # pytest's closing line (threads may still log after it, so not simply the last line)
    local summary
    summary="$(grep -E '^=* ?[0-9]+ (passed|failed|errors?)\b.* in [0-9.]+s' "$work/$label.log" | tail -1)"
    [ -n "$summary" ] || { tail -20 "$work/$label.log"; echo "$label: no pytest summary line" >&2; exit 1; }
    grep -oE '[0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed)' <<<"$summary" \
        | sort -k2 >"$work/$label.counts"
    grep -E '^(FAILED|ERROR) ' "$work/$label.log" | awk '{print $2}' | sort -u >"$work/$label.failed" || true
    echo "$label: $summary [$((SECONDS - t0)) s]"
}

# compare PLUGIN LIBRARY: exits 0 when the stock and plugin runs gave the same counts.
# Otherwise each test that failed in either is run twice more in both modes: one failing
# in both reruns of one mode only is a difference (exit 1), anything else is flaky.
compare() {
    local plugin="$1" library="$2" status=0
    if ! cmp -s "$work/stock.counts" "$work/plugin.counts"; then
        echo "counts differ: stock [$(tr '\n' ' ' <"$work/stock.counts")] plugin [$(tr '\n' ' ' <"$work/plugin.counts")]"
        mapfile -t ids < <(sort -u "$work/stock.failed" "$work/plugin.failed")
        [ "${#ids[@]}" -gt 0 ] || { echo "and no failed test to rerun" >&2; exit 1; }
        for id in "${ids[@]}"; do
            fails=""
            for mode in stock plugin; do
                n=0
                for _ in 1 2; do
                    args=(); [ "$mode" = plugin ] && args=(-p "$plugin")
                    (cd "$suite" && python -m pytest -q -p no:cacheprovider "${args[@]}" "$id") >/dev/null 2>&1 || n=$((n + 1))
                done
                fails="$fails $mode=$n/2"
            done
            case "$fails" in
                *" stock=0/2 plugin=2/2") echo "DIFFERENCE: $id fails with the plugin only"; status=1 ;;
                *" stock=2/2 plugin=0/2") echo "DIFFERENCE: $id fails stock only"; status=1 ;;
                *) echo "flaky (failed in reruns:$fails): $id" ;;
            esac
        done
    else
        echo "same counts: $(tr '\n' ' ' <"$work/stock.counts")"
    fi
    echo "$library suite, stock and with the plugin: $((SECONDS - started)) s"
    exit $status
}
