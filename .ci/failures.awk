# Prints, for every failed test of a `go test -v` log, the last lines that
# test wrote (its t.Log and t.Fatal output), so a CI failure's reason stays
# visible after the suites' log dumps.
/^=== (RUN|CONT|NAME|PAUSE)[[:space:]]/ { cur = $3; next }
/^[[:space:]]*--- FAIL: / { name = $3; failed[name] = 1; order[++n] = name; next }
/^[[:space:]]*--- (PASS|SKIP): / { next }
/^(ok|FAIL|PASS)([[:space:]]|$)/ { cur = ""; next }
cur != "" && /^    / {
  k = ++count[cur]; buf[cur, k] = substr($0, 1, 300)
  if (k > 25) delete buf[cur, k - 25]
}
END {
  for (i = 1; i <= n; i++) {
    t = order[i]
    if (printed[t]++) continue
    print "--- FAIL: " t
    s = count[t] > 25 ? count[t] - 24 : 1
    for (k = s; k <= count[t]; k++) print buf[t, k]
  }
}
