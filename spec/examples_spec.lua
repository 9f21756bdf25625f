-- Examples spec (suite 'examples'): the main job, examples/fashion_mnist.lua, really learns.
-- It trains the MLP on the first 2,000 real Fashion-MNIST training images for one epoch on
-- the CPU and must reach more than 60% accuracy on the 10,000 test images (chance is 10%;
-- a broken gradient, optimiser or data reader stays near it), and writes its per-epoch and
-- per-batch figures (and plot) under names made of the run's settings.  Needs the Debian
-- package dataset-fashion-mnist (or PLOSS_FASHION_MNIST=DIR with the four *-ubyte.gz files).
-- Two ranks as two processes train it with the class centres of ArcFace sharded over them.
local H = require "spec.helpers"

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function run_example(args)
  local out_dir = os.tmpname()
  os.remove(out_dir)
  local data = os.getenv("PLOSS_FASHION_MNIST")
  -- a --data in `args` comes last and wins over PLOSS_FASHION_MNIST
  local cmd = string.format("cd %q && luajit examples/fashion_mnist.lua%s --out %q %s 2>&1", H.root,
    data and (" --data " .. string.format("%q", data)) or "", out_dir, args)
  local p = assert(io.popen(cmd))
  local output = p:read("*a")
  local ok = p:close()
  return output, out_dir, ok
end

describe("examples/fashion_mnist.lua", function()
  it("learns: 2,000 images, 1 epoch, CPU, test accuracy above 60%", function()
    local output, out_dir = run_example("--limit 2000 --epochs 1 --device cpu --seed 1")
    local acc = tonumber(output:match("final test accuracy: ([%d%.]+)"))
    assert(acc, "no final accuracy in the output:\n" .. output)
    assert.is_true(acc > 0.60, string.format("test accuracy %.4f <= 0.60; output:\n%s", acc, output))
    -- the per-epoch line and the CSV
    assert.matches("epoch 1/1  train loss [%d%.]+  test accuracy [%d%.]+%%  %d+ images/s", output)
    local csv_path = output:match("per%-epoch figures: (%S+)")
    assert(csv_path, output)
    local csv = read_file(csv_path)
    assert(csv, "cannot read " .. csv_path)
    local header, row = csv:match("^([^\n]+)\n([^\n]+)\n$")
    assert.are.equal("epoch,train_loss,test_accuracy,images_per_s,peak_bytes,seconds", header)
    local fields = {}
    for v in row:gmatch("[^,]+") do fields[#fields + 1] = tonumber(v) end
    assert.are.equal(6, #fields)
    assert.are.equal(1, fields[1])
    assert.is_true(fields[2] > 0 and fields[2] < 2.3, "train loss " .. fields[2]) -- below log(10)
    H.assert_close(fields[3], acc, { rtol = 1e-4 })
    assert.is_true(fields[5] > 0, "peak memory")
    -- the files are named by the run's settings
    assert.are.equal(out_dir .. "/fashion_mnist-ce-mish-sgd-lr0.05-seed1-e1-n2000-cpu.csv", csv_path)
    -- every batch's loss: 2000 images in batches of 256 = 8 steps, the last one at epoch 1
    local batches_path = output:match("per%-batch training loss: (%S+)")
    assert.are.equal(csv_path:gsub("%.csv$", "-batches.csv"), batches_path)
    local batches = assert(read_file(batches_path), "cannot read " .. batches_path)
    local lines = {}
    for line in batches:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.are.equal("step,epoch,train_loss", lines[1])
    assert.are.equal(1 + 8, #lines)
    local step, at, loss = lines[9]:match("^(%d+),([%d%.]+),([%d%.]+)$")
    assert.are.equal(8, tonumber(step))
    assert.are.equal(1, tonumber(at))
    assert.is_true(tonumber(loss) > 0 and tonumber(loss) < 2.3, lines[9])
    -- the plot, when gnuplot is present
    local png = output:match("plot: (%S+%.png)")
    if png then
      assert.are.equal(csv_path:gsub("%.csv$", ".png"), png)
      local f = assert(io.open(png, "rb"))
      assert.are.equal("\137PNG", f:read(4))
      f:close()
    else
      assert.matches("plot skipped: gnuplot not found", output)
    end
    os.execute("rm -rf " .. string.format("%q", out_dir))
  end)

  it("two ranks (tools/launch.sh): the ArcFace centres sharded, the MLP data-parallel, above 70% after " ..
    "6,000 images", function()
    local out_dir = os.tmpname()
    os.remove(out_dir)
    local data = os.getenv("PLOSS_FASHION_MNIST")
    local args = string.format("%s--out %q --loss arcface --limit 6000 --epochs 1 --device cpu --no-plot",
      data and ("--data " .. string.format("%q", data) .. " ") or "", out_dir)
    local output, status = H.launch(2, "examples/fashion_mnist.lua", args, "PLOSS_COMM_TIMEOUT=120")
    assert.are.equal(0, status, output)
    assert.matches("ranks: 2 %(tools/launch.sh%): the MLP data%-parallel, the class centres sharded %(5/5", output)
    local acc = tonumber(output:match("%[0%] final test accuracy: ([%d%.]+)"))
    assert(acc, "no final accuracy from rank 0:\n" .. output)
    assert.is_true(acc > 0.70, string.format("test accuracy %.4f <= 0.70; output:\n%s", acc, output))
    assert.is_nil(output:match("%[1%] [^\n]*accuracy"), "rank 1 reports nothing:\n" .. output)
    assert.truthy(output:find(out_dir .. "/fashion_mnist-arcface-mish-sgd-lr0.05-seed1-e1-n6000-r2-cpu.csv", 1, true),
      output)
    os.execute("rm -rf " .. string.format("%q", out_dir))
  end)

  it("names the outputs of runs with other settings apart", function()
    local a, out_a = run_example("--limit 300 --epochs 1 --device cpu --no-plot --seed 2 --optim adam")
    local b, out_b = run_example("--limit 300 --epochs 2 --device cpu --no-plot --seed 2 --lr 0.01 --batch-size 100")
    assert.matches("per%-epoch figures: %S+/fashion_mnist%-ce%-mish%-adam%-lr0%.001%-seed2%-e1%-n300%-cpu%.csv", a)
    assert.matches("per%-epoch figures: %S+/fashion_mnist%-ce%-mish%-sgd%-lr0%.01%-seed2%-e2%-n300%-b100%-cpu%.csv", b)
    os.execute(string.format("rm -rf %q %q", out_a, out_b))
  end)

  it("--ema: evaluates with the moving averages of the weights, named apart", function()
    local output, out_dir = run_example("--limit 2000 --epochs 2 --device cpu --no-plot --seed 1 --ema")
    assert.matches("EMA of the weights", output)
    assert.matches("per%-epoch figures: %S+/fashion_mnist%-ce%-mish%-sgd%-lr0%.05%-seed1%-e2%-n2000%-ema%-cpu%.csv", output)
    local acc = tonumber(output:match("final test accuracy: ([%d%.]+)"))
    assert.is_true(acc ~= nil and acc > 0.6, "test accuracy with EMA weights " .. tostring(acc))
    os.execute("rm -rf " .. string.format("%q", out_dir))
  end)

  it("--loss arcface / amsoftmax: 64-d embeddings against learnt class centres learn", function()
    for _, loss in ipairs { "arcface", "amsoftmax" } do
      local output, out_dir = run_example("--limit 2000 --epochs 1 --device cpu --no-plot --seed 1 --loss " .. loss)
      assert.matches("784 %-> 256 %(mish%) %-> 64", output)
      assert.matches("ploss%.nn%.MarginSoftmax%(64 %-> 10 classes", output)
      local acc = tonumber(output:match("final test accuracy: ([%d%.]+)"))
      assert.is_true(acc ~= nil and acc > 0.6, loss .. ": test accuracy " .. tostring(acc) .. "\n" .. output)
      os.execute("rm -rf " .. string.format("%q", out_dir))
    end
  end)

  it("reports missing data with the Debian package's name, and bad options clearly", function()
    local output = run_example("--data /nonexistent-ploss-dir --epochs 1")
    assert.matches("/nonexistent%-ploss%-dir/train%-images%-idx3%-ubyte%.gz not found", output)
    assert.matches("dataset%-fashion%-mnist", output)
    output = run_example("--loss nope")
    assert.matches("unknown criterion 'nope'", output)
    assert.matches("ce ", output)
    assert.matches("ls%-ce", output)
    output = run_example("--epochs x")
    assert.matches("%-%-epochs: expected a positive integer", output)
    output = run_example("--epochs 0")
    assert.matches("%-%-epochs: expected at least 1", output)
    for _, lr in ipairs { "nan", "inf", "0", "1e-400", "-1" } do
      output = run_example("--lr " .. lr)
      assert.matches("%-%-lr: expected a positive finite number, got '" .. lr:gsub("%-", "%%-") .. "'", output)
    end
    output = run_example("--batch-size 0x10")
    assert.matches("%-%-batch%-size: expected a positive integer, got '0x10'", output)
    -- an unknown option is told as unknown, with or without a value after it
    output = run_example("--bogus")
    assert.matches("unknown option %-%-bogus", output)
    output = run_example("--epochs")
    assert.matches("%-%-epochs needs a value", output)
    output = run_example("--seed 1e20")
    assert.matches("%-%-seed: expected a non%-negative integer", output)
    output = run_example("--device cpu:1")
    assert.matches("%-%-device: expected auto, cpu, cuda or cuda:N, got 'cpu:1'", output)
    -- an output folder that cannot be written is told before the training
    output = run_example("--limit 100 --epochs 1 --device cpu --no-plot --out /proc/ploss-nope")
    assert.matches("%-%-out /proc/ploss%-nope: cannot write a file there", output)
    assert.is_nil(output:find("epoch 1/1", 1, true))
  end)
end)
