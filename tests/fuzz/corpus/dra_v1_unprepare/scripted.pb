

mlu1omit-me

mlu2err-1

mlu3extra

mlu4ok