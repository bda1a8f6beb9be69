"""Elementwise kernels (Cython): unary math and its backward forms, binary arithmetic,
comparisons, where, cast, full_like.

Each is a :class:`~fastop._core.kernel.CKernel`: call it on DenseTensors (numpy arrays
and Python scalars are wrapped; a scalar takes the tensor's dtype), optionally with
``out=`` (which may be one of the inputs: in place). Binary ops broadcast by numpy's
rules and require equal dtypes.
"""
from fastop._core.kernel import CKernel

__all__ = ["neg", "abs", "sign", "exp", "log", "sqrt", "square", "tanh", "sigmoid", "relu",
           "tanh_grad", "sigmoid_grad", "relu_grad", "sqrt_grad",
           "add", "subtract", "multiply", "divide", "pow", "maximum", "minimum",
           "equal", "not_equal", "less_than", "less_equal", "greater_than", "greater_equal",
           "where", "cast", "full_like"]

#: ``neg(x)``: -x (int32, int64, float32, float64).
neg: CKernel
#: ``abs(x)``: |x| (int32, int64, float32, float64).
abs: CKernel
#: ``sign(x)``: -1, 0 or 1; nan stays nan (int32, int64, float32, float64).
sign: CKernel
#: ``square(x)``: x * x (int32, int64, float32, float64).
square: CKernel
#: ``relu(x)``: max(x, 0), nan stays nan (int32, int64, float32, float64).
relu: CKernel
#: ``sqrt(x)`` (float32, float64).
sqrt: CKernel
#: ``exp(x)``, SIMD, within ~1 ULP (float32, float64).
exp: CKernel
#: ``log(x)``, SIMD, within ~2 ULP (float32, float64).
log: CKernel
#: ``tanh(x)``, SIMD, within ~3 ULP (float32, float64).
tanh: CKernel
#: ``sigmoid(x)`` = 1 / (1 + exp(-x)), SIMD, within ~3 ULP (float32, float64).
sigmoid: CKernel

#: ``tanh_grad(y, dy)`` = dy * (1 - y^2), y = tanh(x) (float32, float64).
tanh_grad: CKernel
#: ``sigmoid_grad(y, dy)`` = dy * y * (1 - y), y = sigmoid(x) (float32, float64).
sigmoid_grad: CKernel
#: ``relu_grad(y, dy)`` = dy where y > 0 else 0, y = relu(x) (float32, float64).
relu_grad: CKernel
#: ``sqrt_grad(y, dy)`` = dy / (2 y), y = sqrt(x) (float32, float64).
sqrt_grad: CKernel

#: ``add(x, y)`` (int32, int64, float32, float64).
add: CKernel
#: ``subtract(x, y)`` (int32, int64, float32, float64).
subtract: CKernel
#: ``multiply(x, y)`` (int32, int64, float32, float64).
multiply: CKernel
#: ``divide(x, y)``: true division (float32, float64).
divide: CKernel
#: ``pow(x, y)``: x ** y; for integers y must be >= 0 (int32, int64, float32, float64).
pow: CKernel
#: ``maximum(x, y)``: nan wins (int32, int64, float32, float64).
maximum: CKernel
#: ``minimum(x, y)``: nan wins (int32, int64, float32, float64).
minimum: CKernel

#: ``equal(x, y)`` -> bool (every dtype).
equal: CKernel
#: ``not_equal(x, y)`` -> bool (every dtype).
not_equal: CKernel
#: ``less_than(x, y)`` -> bool (every dtype).
less_than: CKernel
#: ``less_equal(x, y)`` -> bool (every dtype).
less_equal: CKernel
#: ``greater_than(x, y)`` -> bool (every dtype).
greater_than: CKernel
#: ``greater_equal(x, y)`` -> bool (every dtype).
greater_equal: CKernel

#: ``where(condition, x, y)``: condition is bool; x and y share a dtype (every dtype).
where: CKernel
#: ``cast(x, dtype=...)``: any dtype to any dtype (to bool: x != 0).
cast: CKernel
#: ``full_like(x, fill_value=0.0)``: x's shape and dtype, filled (every dtype).
full_like: CKernel
