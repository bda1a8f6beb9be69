"""The py_func seeds' code examples, verbatim but for the import line (``import fastop
as paddle``; the tutorial's ``fluid.layers.*`` spelled with ``fastop.static``), with
their results checked against numpy."""
import re
import textwrap

import numpy as np
import pytest

from fastop import static

SEED_001_EXAMPLE_1 = '''
import fastop as paddle
import numpy as np

paddle.enable_static()

# 自定义的前向函数，可直接输入 LoDTenosor
def tanh(x):
    return np.tanh(x)

# 在反向函数中跳过前向输入 x，返回 x 的梯度。
# 必须使用 np.array 主动将 LodTensor 转换为 numpy，否则"+/-"等操作无法使用
def tanh_grad(y, dy):
    return np.array(dy) * (1 - np.square(np.array(y)))

# 自定义的前向函数，可用于调试正在运行的网络（打印值）
def debug_func(x):
    print(x)

def create_tmp_var(name, dtype, shape):
    return paddle.static.default_main_program().current_block().create_var(
        name=name, dtype=dtype, shape=shape)

def simple_net(img, label):
    hidden = img
    for idx in range(4):
        hidden = paddle.static.nn.fc(hidden, size=200)
        new_hidden = create_tmp_var(name='hidden_{}'.format(idx),
            dtype=hidden.dtype, shape=hidden.shape)

        # 用户自定义的前向反向计算
        hidden = paddle.static.py_func(func=tanh, x=hidden,
            out=new_hidden, backward_func=tanh_grad,
            skip_vars_in_backward_input=hidden)

        # 用户自定义的调试函数，打印出输入的 LodTensor
        paddle.static.py_func(func=debug_func, x=hidden, out=None)

    prediction = paddle.static.nn.fc(hidden, size=10, activation='softmax')
    ce_loss = paddle.nn.CrossEntropyLoss()
    return ce_loss(prediction, label)

x = paddle.static.data(name='x', shape=[None, 4], dtype='float32')
y = paddle.static.data(name='y', shape=[10], dtype='int64')
res = simple_net(x, y)

exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(paddle.static.default_startup_program())
input1 = np.random.random(size=[10, 4]).astype('float32')
input2 = np.random.randint(1, 10, size=[10], dtype='int64')
out = exe.run(paddle.static.default_main_program(),
              feed={'x':input1, 'y':input2},
              fetch_list=[res.name])
print(out)
'''

SEED_001_EXAMPLE_2 = '''
# 该示例展示了如何将 LoDTensor 转化为 numpy 数组，并利用 numpy API 来自定义一个 OP
import fastop as paddle
import numpy as np

paddle.enable_static()

def element_wise_add(x, y):
    # 必须先手动将 LodTensor 转换为 numpy 数组，否则无法支持 numpy 的 shape 操作
    x = np.array(x)
    y = np.array(y)

    if x.shape != y.shape:
        raise AssertionError("the shape of inputs must be the same!")

    result = np.zeros(x.shape, dtype='int32')
    for i in range(len(x)):
        for j in range(len(x[0])):
            result[i][j] = x[i][j] + y[i][j]

    return result

def create_tmp_var(name, dtype, shape):
    return paddle.static.default_main_program().current_block().create_var(
                name=name, dtype=dtype, shape=shape)

def py_func_demo():
    start_program = paddle.static.default_startup_program()
    main_program = paddle.static.default_main_program()

    # 创建前向函数的输入变量
    x = paddle.static.data(name='x', shape=[2,3], dtype='int32')
    y = paddle.static.data(name='y', shape=[2,3], dtype='int32')

    # 创建前向函数的输出变量，必须指明变量名称 name/数据类型 dtype/维度 shape
    output = create_tmp_var('output','int32', [3,1])

    # 输入多个 LodTensor 以 list[Variable]或 tuple(Variable)形式
    paddle.static.py_func(func=element_wise_add, x=[x,y], out=output)

    exe=paddle.static.Executor(paddle.CPUPlace())
    exe.run(start_program)

    # 给 program 喂入 numpy 数组
    input1 = np.random.randint(1, 10, size=[2,3], dtype='int32')
    input2 = np.random.randint(1, 10, size=[2,3], dtype='int32')
    out = exe.run(main_program,
                feed={'x':input1, 'y':input2},
                fetch_list=[output.name])
    print("{0} + {1} = {2}".format(input1, input2, out))

py_func_demo()
'''

# The tutorial (seed 000/002), fluid.layers.* spelled with fastop.static.
SEED_000_TUTORIAL = '''
import fastop as paddle
import numpy as np
fluid = paddle.static

def my_tanh(x):
    return np.tanh(x)

def my_tanh_grad(x, y, dy):
    return np.array(dy) * (1 - np.square(np.array(y)))

def my_tanh_grad_without_x(y, dy):
    return np.array(dy) * (1 - np.square(np.array(y)))

def create_tmp_var(program, name, dtype, shape):
    return program.current_block().create_var(name=name, dtype=dtype, shape=shape)

in_var = fluid.data(name='input', dtype='float32', shape=[-1, 28, 28])

# 手动创建前向输出变量
out_var = create_tmp_var(fluid.default_main_program(), name='output', dtype='float32', shape=[-1, 28, 28])

fluid.py_func(func=my_tanh, x=in_var, out=out_var, backward_func=my_tanh_grad)

out_var2 = create_tmp_var(fluid.default_main_program(), name='output2', dtype='float32', shape=[-1, 28, 28])
fluid.py_func(func=my_tanh, x=in_var, out=out_var2, backward_func=my_tanh_grad_without_x,
    skip_vars_in_backward_input=in_var)
'''


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_seed_001_example_1(static_env, capsys):
    main, _, scope = static_env
    namespace = {}
    exec(textwrap.dedent(SEED_001_EXAMPLE_1), namespace)
    (loss,) = namespace["out"]
    printed = capsys.readouterr().out
    # debug_func ran for every hidden layer, printing the array it got
    assert len(re.findall(r"^\[\[", printed, flags=re.MULTILINE)) == 4
    params = [np.asarray(scope.find_var(p.name)) for p in main.all_parameters()]
    assert len(params) == 10
    h = namespace["input1"]
    for i in range(4):
        h = np.tanh(h @ params[2 * i] + params[2 * i + 1])
    prediction = _softmax(h @ params[8] + params[9])
    label = namespace["input2"]
    expected = -np.log(_softmax(prediction)[np.arange(10), label]).mean()
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_seed_001_example_2(static_env, capsys):
    main, _, _ = static_env
    with pytest.warns(RuntimeWarning, match=r"'output' was declared with shape \[3, 1\] "
                                            r"but element_wise_add returned shape \[2, 3\]"):
        exec(textwrap.dedent(SEED_001_EXAMPLE_2), {})
    assert "array([[" in capsys.readouterr().out
    a = np.arange(6, dtype="int32").reshape(2, 3)
    exe = static.Executor(static.CPUPlace())
    (out,) = exe.run(main, feed={"x": a, "y": 10 * a}, fetch_list=["output"])
    np.testing.assert_array_equal(out, 11 * a)
    assert out.dtype == np.int32


def test_seed_000_tutorial(static_env, exe):
    main, _, _ = static_env
    namespace = {}
    exec(textwrap.dedent(SEED_000_TUTORIAL), namespace)
    x = np.random.default_rng(0).standard_normal((2, 28, 28)).astype("float32")
    out, out2 = exe.run(main, feed={"input": x}, fetch_list=["output", "output2"])
    np.testing.assert_allclose(out, np.tanh(x), rtol=1e-6)
    np.testing.assert_allclose(out2, np.tanh(x), rtol=1e-6)


def test_seed_000_tutorial_backward(static_env, exe):
    """Both backward forms (with x, and with x skipped) give tanh's gradient."""
    main, _, _ = static_env
    namespace = {}
    exec(textwrap.dedent(SEED_000_TUTORIAL), namespace)
    x = np.random.default_rng(0).standard_normal((2, 28, 28)).astype("float32")
    dx1, dx2 = static.gradients([namespace["out_var"], namespace["out_var2"]],
                                [namespace["in_var"], namespace["in_var"]])
    assert dx1 is dx2
    (g,) = exe.run(main, feed={"input": x}, fetch_list=[dx1])
    np.testing.assert_allclose(g, 2 * (1 - np.tanh(x) ** 2), rtol=1e-5)
