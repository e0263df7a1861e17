import json, re, time, sys
# CPU in three kinds of Python work, plus a sleep between rounds.
data = [{"k%d" % i: [i, str(i) * 3, {"x": i / 7}]} for i in range(3000)]
pat = re.compile(r"(\d+)(\w)\1")
for r in range(int(sys.argv[1])):
    s = json.dumps(data); json.loads(s)
    sum(len(m.group(0)) for m in pat.finditer(s))
    sorted(str(x * 7919 % 10007) for x in range(60000))
    time.sleep(0.01)
