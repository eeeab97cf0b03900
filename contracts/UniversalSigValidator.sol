// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

interface IERC1271Wallet {
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4);
}

/**
 * @title UniversalSigValidator
 * @notice ERC-6492's off-chain verifier, written for x402srv from the ERC's specification. It is
 * never deployed: x402srv sends its creation code with the constructor's arguments as an
 * `eth_call` without a `to` (a "deployless" call), so the wallet's deployment it may perform
 * happens in that call only. The constructor's return data is one byte, 0x01 for a valid
 * signature, 0x00 for any other; a factory that fails makes the call revert (also "not valid").
 *
 * Whether `signer` signed `hash` with `signature`:
 * 1. A signature ending in the 32-byte ERC-6492 suffix is `abi.encode(factory, factoryCalldata,
 *    innerSignature) ++ suffix`. If `signer` has no code yet, `factory` is called with
 *    `factoryCalldata` (which deploys the wallet), then the inner signature is checked.
 * 2. A contract is asked through ERC-1271 `isValidSignature(hash, innerSignature)`; if a wrapped
 *    signature's contract already exists but says no, the factory is called (the ERC's "prepare"
 *    step, for a wallet whose deployment data changes its state) and the contract asked again.
 * 3. An address without code: the 65-byte ECDSA signature must recover to it.
 */
contract UniversalSigValidator {
    bytes32 private constant ERC6492_SUFFIX = 0x6492649264926492649264926492649264926492649264926492649264926492;
    bytes4 private constant ERC1271_MAGIC_VALUE = 0x1626ba7e;

    constructor(address signer, bytes32 hash, bytes memory signature) {
        bool valid = _isValid(signer, hash, signature);
        assembly {
            mstore(0, valid)
            return(31, 1)
        }
    }

    function _isValid(address signer, bytes32 hash, bytes memory signature) private returns (bool) {
        bool wrapped = _endsWithSuffix(signature);
        address factory;
        bytes memory factoryCalldata;
        bytes memory inner = signature;
        if (wrapped) {
            // Decode everything before the suffix: shorten the bytes in place for abi.decode.
            assembly {
                mstore(signature, sub(mload(signature), 32))
            }
            (factory, factoryCalldata, inner) = abi.decode(signature, (address, bytes, bytes));
            if (signer.code.length == 0) {
                _call(factory, factoryCalldata);
            }
        }
        if (signer.code.length > 0) {
            if (_asks1271(signer, hash, inner)) {
                return true;
            }
            if (!wrapped) {
                return false;
            }
            _call(factory, factoryCalldata);
            return _asks1271(signer, hash, inner);
        }
        return _recovers(signer, hash, inner);
    }

    function _endsWithSuffix(bytes memory signature) private pure returns (bool) {
        uint256 length = signature.length;
        if (length < 32) {
            return false;
        }
        bytes32 tail;
        assembly {
            tail := mload(add(signature, length))
        }
        return tail == ERC6492_SUFFIX;
    }

    function _call(address factory, bytes memory factoryCalldata) private {
        (bool ok,) = factory.call(factoryCalldata);
        require(ok, "ERC6492: the factory call failed");
    }

    function _asks1271(address signer, bytes32 hash, bytes memory signature) private view returns (bool) {
        (bool ok, bytes memory answer) =
            signer.staticcall(abi.encodeWithSelector(IERC1271Wallet.isValidSignature.selector, hash, signature));
        return ok && answer.length >= 32 && abi.decode(answer, (bytes32)) == bytes32(ERC1271_MAGIC_VALUE);
    }

    function _recovers(address signer, bytes32 hash, bytes memory signature) private pure returns (bool) {
        if (signature.length != 65) {
            return false;
        }
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly {
            r := mload(add(signature, 32))
            s := mload(add(signature, 64))
            v := byte(0, mload(add(signature, 96)))
        }
        if (v != 27 && v != 28) {
            return false;
        }
        address recovered = ecrecover(hash, v, r, s);
        return recovered != address(0) && recovered == signer;
    }
}
